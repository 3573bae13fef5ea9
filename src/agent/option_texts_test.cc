// watch's options from text (agent/option_texts): each value refused names its option,
// so the command line and the options file re-read on SIGHUP say the same thing.

#include "agent/option_texts.h"

#include <gtest/gtest.h>

namespace gpureap::agent {
namespace {

using namespace std::chrono_literals;

TEST(ResolveOptions, TheDefaultsAreTheAgentsOwn) {
  auto o = resolve_options(OptionTexts{}, "/state");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->state_dir, "/state");
  EXPECT_EQ(o->watch.tick, kDefaultTick);
  EXPECT_EQ(o->watch.full_scan, kDefaultFullScan);
  EXPECT_TRUE(o->watch.full_scan_auto);
  EXPECT_EQ(o->listen, kDefaultListen);
  EXPECT_FALSE(o->reap_orphans_after);
  EXPECT_FALSE(o->socket_group);
}

TEST(ResolveOptions, ValuesAreTakenAsGiven) {
  OptionTexts t;
  t.tick = "250ms";
  t.full_scan = "2m";
  t.no_listen = true;
  t.socket_group = "4242";
  t.reap_after = "10m";
  t.keep = "^python .*sglang";
  t.reap_dry_run = true;
  auto o = resolve_options(t, "/state");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->watch.tick, 250ms);
  EXPECT_EQ(o->watch.full_scan, 2min);
  EXPECT_FALSE(o->watch.full_scan_auto) << "a given duration is kept exactly";
  EXPECT_FALSE(o->listen) << "--no-listen serves nothing";
  EXPECT_EQ(o->socket_group, 4242u);
  EXPECT_EQ(o->reap_orphans_after, 10min);
  EXPECT_EQ(o->keep_regex, "^python .*sglang");
  EXPECT_TRUE(o->reap_dry_run);
}

TEST(ResolveOptions, EachRefusalNamesItsOption) {
  const std::vector<std::pair<OptionTexts, std::string>> cases = [] {
    std::vector<std::pair<OptionTexts, std::string>> c;
    OptionTexts t;
    t.tick = "0s";
    c.push_back({t, "--tick"});
    t = {};
    t.full_scan = "often";
    c.push_back({t, "--full-scan-interval"});
    t = {};
    t.socket_group = "no-such-group-w4";
    c.push_back({t, "--socket-group: no group named no-such-group-w4"});
    t = {};
    t.reap_after = "-1s";
    c.push_back({t, "--reap-orphans-after"});
    t = {};
    t.keep = "(";
    c.push_back({t, "--keep: "});
    t = {};
    t.reap_dry_run = true;
    c.push_back({t, "--reap-dry-run: needs --reap-orphans-after"});
    t = {};
    t.web_config = "/nonexistent/web.yml";
    t.no_listen = true;
    c.push_back({t, "--web-config: nothing is served with --no-listen"});
    t.no_listen = false;
    c.push_back({t, "--web-config /nonexistent/web.yml: "});
    return c;
  }();
  for (const auto& [texts, said] : cases) {
    auto o = resolve_options(texts, "/state");
    ASSERT_FALSE(o) << said;
    EXPECT_TRUE(o.error().message.starts_with(said)) << o.error().message;
  }
}

}  // namespace
}  // namespace gpureap::agent
