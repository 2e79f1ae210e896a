// ReaderList: the tracker's readers, two inline, more on the heap; copies and moves keep the order
// and the contents whichever storage they are in.
#include "task/reader_list.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace nerve::detail {
namespace {

// Distinct fake pointers: the list never dereferences them.
TaskRecord* fake(std::size_t i) { return reinterpret_cast<TaskRecord*>(0x1000 + 64 * i); }

std::vector<TaskRecord*> contents(const ReaderList& list) { return {list.begin(), list.end()}; }

std::vector<TaskRecord*> first(std::size_t n) {
  std::vector<TaskRecord*> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(fake(i));
  return out;
}

TEST(ReaderList, InlineThenHeapKeepsOrder) {
  ReaderList list;
  EXPECT_EQ(list.capacity(), ReaderList::inline_capacity);
  for (std::size_t n = 1; n <= 40; ++n) {
    list.push_back(fake(n - 1));
    EXPECT_EQ(contents(list), first(n));
    EXPECT_GE(list.capacity(), n);
  }
  const std::size_t grown = list.capacity();
  list.clear();
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.capacity(), grown) << "clear keeps the room";
}

TEST(ReaderList, ReserveThenPushAndEraseTail) {
  ReaderList list;
  list.reserve(5);
  EXPECT_GE(list.capacity(), 5u);
  for (std::size_t i = 0; i < 5; ++i) list.push_back(fake(i));
  // As std::remove_if's tail: keep the even ones.
  auto* kept = std::remove_if(list.begin(), list.end(), [](TaskRecord* t) {
    return ((reinterpret_cast<std::uintptr_t>(t) - 0x1000) / 64) % 2 == 1;
  });
  list.erase_from(kept);
  EXPECT_EQ(contents(list), (std::vector<TaskRecord*>{fake(0), fake(2), fake(4)}));
}

TEST(ReaderList, CopiesAndMovesInBothStorages) {
  for (const std::size_t n : {0u, 1u, 2u, 3u, 9u}) {
    ReaderList list;
    for (std::size_t i = 0; i < n; ++i) list.push_back(fake(i));
    ReaderList copy(list);
    EXPECT_EQ(contents(copy), first(n));
    EXPECT_EQ(contents(list), first(n)) << "the source of a copy is unchanged";
    ReaderList moved(std::move(copy));
    EXPECT_EQ(contents(moved), first(n));
    EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): a moved-from list is empty
    copy.push_back(fake(99));   // and usable
    EXPECT_EQ(contents(copy), std::vector<TaskRecord*>{fake(99)});
    ReaderList assigned;
    for (std::size_t i = 0; i < 5; ++i) assigned.push_back(fake(50 + i));
    assigned = list;
    EXPECT_EQ(contents(assigned), first(n));
    ReaderList move_assigned;
    move_assigned.push_back(fake(77));
    move_assigned = std::move(assigned);
    EXPECT_EQ(contents(move_assigned), first(n));
    // Segments live in a std::vector: growing it moves them.
    std::vector<ReaderList> many(1, list);
    for (int i = 0; i < 20; ++i) many.push_back(list);
    for (const ReaderList& each : many) EXPECT_EQ(contents(each), first(n));
  }
}

}  // namespace
}  // namespace nerve::detail
