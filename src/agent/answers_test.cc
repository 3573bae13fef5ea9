// The answers' freshness policy on a fake loop (AnswerSource) and a FakeClock: which
// questions cause a look (W2-17, W2-18, W3-11), and who may make the agent let go of NVML.
// No socket, no HTTP server: the decisions only (the e2e tests keep the wire).

#include "agent/answers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "gpu/fake_gpu_source.h"
#include "inventory/inventory_wire.h"
#include "inventory/test_views.h"
#include "util/clock.h"

namespace gpureap::agent {
namespace {

class FakeLoop final : public AnswerSource {
 public:
  explicit FakeLoop(util::Clock& clock) : clock_(clock) {
    inv_.gpus.push_back(inventory::testing::idle_gpu(0));
  }
  void look_now() override {
    ++looks;
    last_ = clock_.now();
  }
  std::optional<util::Clock::time_point> last_look() const override { return last_; }
  const inventory::Inventory& inventory() const override { return inv_; }
  report::AgentHealth health() const override { return {}; }
  std::string metrics(std::optional<double>) override { return "metrics\n"; }
  bool nvml_yielded() const override { return yielded; }
  void yield_nvml(std::chrono::milliseconds, const std::string& by) override {
    yielded = true;
    yielded_by = by;
  }
  void resume_nvml(const std::string&, const std::string&) override { yielded = false; }
  bool reaping() const override { return reaping_now; }

  int looks = 0;
  bool yielded = false;
  bool reaping_now = false;
  std::string yielded_by;

 private:
  util::Clock& clock_;
  inventory::Inventory inv_;
  std::optional<util::Clock::time_point> last_;
};

struct Fixture {
  util::FakeClock clock;
  FakeLoop loop{clock};
  inventory::Node node{inventory::NodeConfig{}, std::make_unique<gpu::FakeGpuSource>(), clock};
  Answers answers{node, loop};

  /// One scrape, as the HTTP server's thread asks it; this thread plays the loop.
  HttpResponse scrape() {
    std::atomic<bool> answered{false};
    HttpResponse response;
    std::thread server([&] {
      response = answers.http_answer("/metrics");
      answered = true;
    });
    while (!answered) answers.serve(true);
    server.join();
    return response;
  }

  /// One batch of socket clients: what the loop's serve() does for those that came together.
  void batch(const std::vector<Peer>& peers) {
    answers.serve(false);  // a new batch (no socket is open: no client is served)
    for (const auto& p : peers) (void)answers.control_answer(p, std::string(inventory::kInventoryRequest));
  }
};

const Peer kRoot{100, 0, 0};
const Peer kUser{200, 1000, 1000};

TEST(Answers, QuestionsThatComeTogetherShareOneLook) {
  Fixture f;
  f.batch({kRoot, kUser, kUser, kRoot});
  EXPECT_EQ(f.loop.looks, 1);
  f.batch({kUser});
  EXPECT_EQ(f.loop.looks, 2);
}

TEST(Answers, W3_11_AUserCausesAtMostFourLooksASecondRootAny) {
  Fixture f;
  for (int i = 0; i < 10; ++i) f.batch({kUser});
  EXPECT_EQ(f.loop.looks, static_cast<int>(kSocketRefreshesPerUid));
  f.clock.advance(std::chrono::seconds(1));
  f.batch({kUser});
  EXPECT_EQ(f.loop.looks, static_cast<int>(kSocketRefreshesPerUid) + 1);
  const int before = f.loop.looks;
  for (int i = 0; i < 10; ++i) f.batch({kRoot});
  EXPECT_EQ(f.loop.looks, before + 10);
}

TEST(Answers, W2_18_AScrapeLooksAtMostOnceASecond) {
  Fixture f;
  EXPECT_EQ(f.scrape().body, "metrics\n");
  EXPECT_EQ(f.scrape().status, 200);
  EXPECT_EQ(f.loop.looks, 1);
  f.clock.advance(kScrapeRefreshInterval);
  (void)f.scrape();
  EXPECT_EQ(f.loop.looks, 2);
  f.loop.yielded = true;  // NVML let go: the last look's figures
  f.clock.advance(kScrapeRefreshInterval);
  (void)f.scrape();
  EXPECT_EQ(f.loop.looks, 2);
}

TEST(Answers, NoLookWhileNvmlIsLetGo) {
  Fixture f;
  f.loop.yielded = true;
  const std::string answer =
      f.answers.control_answer(kRoot, std::string(inventory::kInventoryRequest));
  EXPECT_NE(answer.find("let go of NVML"), std::string::npos);
  EXPECT_EQ(f.loop.looks, 0);
}

TEST(Answers, OnlyRootMakesTheAgentLetGoOfNvmlAndNotDuringAReap) {
  Fixture f;
  const std::string yield(inventory::kYieldSourceRequest);
  (void)f.answers.control_answer(kUser, yield + " 5000");
  EXPECT_FALSE(f.loop.yielded);
  f.loop.reaping_now = true;
  EXPECT_NE(f.answers.control_answer(kRoot, yield + " 5000").find("reaping"), std::string::npos);
  EXPECT_FALSE(f.loop.yielded);
  f.loop.reaping_now = false;
  (void)f.answers.control_answer(kRoot, yield + " 5000");
  EXPECT_TRUE(f.loop.yielded);
  EXPECT_EQ(f.loop.yielded_by, "pid 100");
}

TEST(Answers, AMalformedYieldIsRefused) {
  Fixture f;
  const std::string yield(inventory::kYieldSourceRequest);
  EXPECT_NE(f.answers.control_answer(kRoot, yield + " soon").find("milliseconds"),
            std::string::npos);
  EXPECT_FALSE(f.loop.yielded);
}

}  // namespace
}  // namespace gpureap::agent
