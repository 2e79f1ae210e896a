// The distributed wire format on its own: tags, compression round trips, batches.
#include "dist/wire.hpp"

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "nerve/error.hpp"

namespace nerve::distributed::detail {
namespace {

std::vector<std::byte> bytes_of(std::size_t size, bool compressible, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<std::byte>(compressible ? (i / 64) % 7 : random() & 0xff);
  }
  return bytes;
}

TEST(Wire, TagsCarryKindAndSequence) {
  const std::uint64_t mask = (std::uint64_t{1} << 28) - 1;
  for (Kind kind : {Kind::raw, Kind::compressed, Kind::batch, Kind::failure}) {
    for (std::uint64_t sequence : {std::uint64_t{0}, std::uint64_t{1}, mask, mask + 5}) {
      const int tag = make_tag(kind, sequence, mask);
      EXPECT_GE(tag, 0);
      EXPECT_EQ(tag_kind(tag), kind);
      EXPECT_EQ(tag_sequence(tag), sequence & mask);
    }
  }
}

TEST(Wire, CompressionRoundTrips) {
  if (!zstd_available()) GTEST_SKIP() << "built without zstd";
  for (std::size_t size : {std::size_t{1}, std::size_t{100}, std::size_t{4096}, std::size_t{1} << 20}) {
    const auto data = bytes_of(size, true, 1);
    const auto frame = compress(data);
    if (size < 100) continue;  // too small to shrink: compress() declines
    ASSERT_FALSE(frame.empty()) << size;
    EXPECT_LT(frame.size(), size / 4);
    ASSERT_EQ(decompressed_size(frame), size);
    std::vector<std::byte> back(size);
    decompress(frame, back);
    EXPECT_EQ(back, data);
  }
}

TEST(Wire, IncompressibleDataIsSentAsIs) {
  if (!zstd_available()) GTEST_SKIP() << "built without zstd";
  EXPECT_TRUE(compress(bytes_of(65536, false, 2)).empty());
}

TEST(Wire, CorruptFramesAreErrorsNotCrashes) {
  if (!zstd_available()) GTEST_SKIP() << "built without zstd";
  auto frame = compress(bytes_of(8192, true, 3));
  ASSERT_FALSE(frame.empty());
  std::vector<std::byte> out(8192);
  std::vector<std::byte> truncated(frame.begin(),
                                   frame.begin() + static_cast<std::ptrdiff_t>(frame.size() / 2));
  EXPECT_THROW(decompress(truncated, out), Error);
  std::vector<std::byte> wrong_size(100);
  EXPECT_THROW(decompress(frame, wrong_size), Error);
}

TEST(Wire, BatchesKeepEveryItem) {
  std::vector<std::byte> batch;
  const auto a = bytes_of(10, false, 4);
  const auto b = bytes_of(0, false, 5);
  const auto c = bytes_of(300, true, 6);
  append_item(batch, 7, a, false);
  append_item(batch, 8, b, false);
  append_item(batch, 1u << 30, c, true);
  std::vector<std::uint64_t> sequences;
  std::vector<std::vector<std::byte>> items;
  std::vector<bool> compressed;
  for_each_item(batch, [&](std::uint64_t sequence, std::span<const std::byte> bytes, bool is_compressed) {
    sequences.push_back(sequence);
    items.emplace_back(bytes.begin(), bytes.end());
    compressed.push_back(is_compressed);
  });
  EXPECT_EQ(sequences, (std::vector<std::uint64_t>{7, 8, 1u << 30}));
  EXPECT_EQ(items, (std::vector<std::vector<std::byte>>{a, b, c}));
  EXPECT_EQ(compressed, (std::vector<bool>{false, false, true}));
  batch.pop_back();
  EXPECT_THROW(for_each_item(batch, [](auto, auto, auto) {}), Error);
}

// dump_trace()'s gather summed the ranks' lengths in an int: over 2 GiB in all the sum wrapped,
// rank 0 threw std::length_error alone and the other ranks waited in MPI_Gatherv for ever. The size
// rule every rank applies alike to the 64-bit lengths, with sizes no test could allocate.
TEST(Wire, CollectivesOverMpisIntCountAreRefused) {
  const std::uint64_t max = collective_bytes_max;
  EXPECT_EQ(max, 2147483647u);
  const auto check = [max](std::vector<std::uint64_t> lengths) {
    return collective_size_error("the merged trace", lengths, max);
  };
  EXPECT_EQ(check({}), std::nullopt);
  EXPECT_EQ(check({0, 0}), std::nullopt);
  EXPECT_EQ(check({max}), std::nullopt) << "exactly the limit fits";
  EXPECT_EQ(check({max - 1, 1}), std::nullopt);
  // The reviewer's case: ~1.1 GB per rank, 2.2 GB in all (the int sum was negative).
  EXPECT_EQ(check({1'100'000'000, 1'100'000'000}),
            "the merged trace is 2200000000 bytes from 2 ranks (rank 0 the most: 1100000000 bytes), over "
            "the 2147483647 bytes one MPI collective moves (MPI's int count)");
  EXPECT_NE(check({max, 1}), std::nullopt) << "one byte over, in all";
  EXPECT_NE(check({0, max + 1, 0}), std::nullopt) << "one rank over alone (an int length was negative)";
  EXPECT_NE(check({std::uint64_t{1} << 32}), std::nullopt) << "an int length was 0";
  // A 64-bit sum that wrapped would fit again: it saturates instead.
  const auto wrapped = check({UINT64_MAX, 2, 7});
  ASSERT_NE(wrapped, std::nullopt);
  EXPECT_NE(wrapped->find(" is 18446744073709551615 bytes from 3 ranks (rank 0 the most"), std::string::npos)
      << *wrapped;
  // A lower limit (what the MPI test uses to reach the refusal on every rank).
  EXPECT_EQ(collective_size_error("x", std::vector<std::uint64_t>{40, 24}, 64), std::nullopt);
  EXPECT_EQ(
      collective_size_error("x", std::vector<std::uint64_t>{40, 25}, 64),
      "x is 65 bytes from 2 ranks (rank 0 the most: 40 bytes), over the 64 bytes one MPI collective moves "
      "(MPI's int count)");
}

}  // namespace
}  // namespace nerve::distributed::detail
