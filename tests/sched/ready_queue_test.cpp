// Per-device ready queues: FIFO order, the capacity bound, and exactly-once delivery with many
// producers and competing consumers — for both implementations (task_queue.type).
#include "sched/ready_queue.hpp"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "nerve/config.hpp"

namespace nerve {
namespace {

struct Node : QueueLink {
  int id = 0;
};

class ReadyQueueTest : public ::testing::TestWithParam<QueueType> {};

TEST_P(ReadyQueueTest, FifoOrderAndCapacity) {
  ReadyQueue queue(GetParam(), 3);
  Node nodes[5];
  for (int i = 0; i < 5; ++i) nodes[i].id = i;
  EXPECT_TRUE(queue.try_push(&nodes[0]));
  EXPECT_TRUE(queue.try_push(&nodes[1]));
  EXPECT_TRUE(queue.try_push(&nodes[2]));
  EXPECT_FALSE(queue.try_push(&nodes[3])) << "a full queue refuses a submission";
  EXPECT_EQ(queue.size(), 3u);
  queue.push_unbounded(&nodes[3]);  // internal releases never drop work
  EXPECT_EQ(queue.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(static_cast<Node*>(queue.try_pop())->id, i);
  EXPECT_EQ(queue.try_pop(), nullptr);
  EXPECT_TRUE(queue.try_push(&nodes[4]));
  EXPECT_EQ(static_cast<Node*>(queue.try_pop())->id, 4);
  EXPECT_FALSE(queue.maybe_nonempty());
}

TEST_P(ReadyQueueTest, ManyProducersCompetingConsumersExactlyOnce) {
  constexpr int producers = 4;
  constexpr int per_producer = 20000;
  ReadyQueue queue(GetParam(), 64);
  std::vector<Node> nodes(producers * per_producer);
  std::vector<std::atomic<int>> seen(nodes.size());
  std::atomic<int> consumed{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < per_producer; ++i) {
        Node& node = nodes[static_cast<std::size_t>(p * per_producer + i)];
        node.id = p * per_producer + i;
        while (!queue.try_push(&node)) std::this_thread::yield();  // back-pressure
      }
    });
  }
  for (int c = 0; c < 2; ++c) {
    threads.emplace_back([&] {
      while (consumed.load() < static_cast<int>(nodes.size())) {
        if (QueueLink* link = queue.try_pop()) {
          seen[static_cast<std::size_t>(static_cast<Node*>(link)->id)].fetch_add(1);
          consumed.fetch_add(1);
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (std::size_t i = 0; i < nodes.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << i;
  EXPECT_EQ(queue.size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ReadyQueueTest,
                         ::testing::Values(QueueType::lock_free_mpsc, QueueType::mutex),
                         [](const auto& info) {
                           return info.param == QueueType::lock_free_mpsc ? std::string("lock_free_mpsc")
                                                                          : std::string("mutex");
                         });

}  // namespace
}  // namespace nerve
