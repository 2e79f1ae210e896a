// Buffers: mapping, try_map, misuse errors, slices.
#include <atomic>

#include "runtime_test.hpp"

namespace nerve::testing {
namespace {

using BuffersTest = RuntimeTest;

TEST_P(BuffersTest, InitialContentsAndToVector) {
  std::vector<double> values{1, 2, 3, 4};
  Buffer<double> buffer(*context, std::span<const double>(values));
  EXPECT_EQ(buffer.size(), 4u);
  EXPECT_EQ(buffer.size_bytes(), 32u);
  EXPECT_EQ(buffer.to_vector(), values);
  EXPECT_EQ(buffer.slice(1, 2).to_vector(), (std::vector<double>{2, 3}));
  EXPECT_EQ(buffer.slice(1, 3).slice(1, 1).to_vector(), (std::vector<double>{3}));
}

TEST_P(BuffersTest, ReadMappingWaitsForWriters) {
  Buffer<int> buffer(*context, 1);
  context->spawn(
      [](std::span<int> b) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        b[0] = 42;
      },
      write(buffer));
  auto mapped = buffer.map_read();
  EXPECT_EQ(mapped[0], 42);
}

TEST_P(BuffersTest, TasksWaitForUnmap) {
  Buffer<int> buffer(*context, 1);
  auto mapped = buffer.map_write();
  mapped[0] = 1;
  Task task = context->submit([](std::span<int> b) { b[0] *= 10; }, read_write(buffer));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(task.done()) << "a conflicting task started while the buffer was mapped";
  mapped[0] = 2;
  mapped.unmap();
  task.wait();
  EXPECT_EQ(buffer.to_vector()[0], 20);
}

TEST_P(BuffersTest, TryMapIsBusyWhileATaskWrites) {
  Buffer<int> buffer(*context, 1);
  auto holder = buffer.map_write();
  context->spawn([](std::span<int> b) { b[0] = 3; }, write(buffer));
  EXPECT_FALSE(buffer.try_map(Access::write).has_value()) << "a task is pending on the buffer";
  holder.unmap();
  context->wait_all();
  auto mapped = buffer.try_map(Access::read_write);
  ASSERT_TRUE(mapped.has_value());
  EXPECT_EQ((*mapped)[0], 3);
}

TEST_P(BuffersTest, ConcurrentReadMappings) {
  Buffer<int> buffer(*context, std::vector<int>{9});
  auto first = buffer.map_read();
  auto second = buffer.try_map(Access::read);
  ASSERT_TRUE(second.has_value()) << "two read mappings do not conflict";
  EXPECT_EQ(first[0] + (*second)[0], 18);
}

TEST_P(BuffersTest, MisuseIsAnErrorNamingWhatHappened) {
  Buffer<int> buffer(*context, 10, BufferOptions{.name = "weights"});
  try {
    (void)buffer.slice(8, 5);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::buffer_misuse);
    EXPECT_NE(std::string(error.what()).find("outside"), std::string::npos) << error.what();
  }
  Mapped<int> mapping = buffer.map_write();
  mapping.unmap();
  EXPECT_THROW(mapping.unmap(), Error) << "unmap without map";
  Buffer<int> empty;
  EXPECT_THROW(empty.map_read(), Error);
  EXPECT_THROW(context->spawn([](std::span<int>) {}, write(empty)), Error);
  EXPECT_THROW(Buffer<int>(*context, 4, BufferOptions{.numa_node = 99}), Error);
  Context other(make_settings(1));
  Buffer<int> foreign(other, 1);
  EXPECT_THROW(context->spawn([](std::span<int>) {}, write(foreign)), Error) << "buffer of another context";
}

TEST_P(BuffersTest, BufferLivesUntilItsLastTaskFinishes) {
  std::atomic<int> value{0};
  {
    Buffer<int> temporary(*context, 1);
    context->spawn([](std::span<int> t) { t[0] = 5; }, write(temporary));
    context->spawn(
        [&](std::span<const int> t) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          value = t[0];
        },
        read(temporary));
  }  // the handle goes first; the tasks keep the data alive
  context->wait_all();
  EXPECT_EQ(value.load(), 5);
}

INSTANTIATE_TEST_SUITE_P(Runtime, BuffersTest, NERVE_RUNTIME_PARAMS, runtime_param_name);

}  // namespace
}  // namespace nerve::testing
