#include "top/rows.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "proc/lineage.h"
#include "report/instance_text.h"

namespace gpureap::top {
namespace {

// One holder over every GPU it uses.
struct Held {
  const proc::Holder* holder = nullptr;
  std::vector<gpu::DeviceId> gpus;
  std::uint64_t bytes = 0;
  bool bytes_known = true;
  std::optional<unsigned> sm_percent;  // the highest of its GPUs' samples (a hint)
};

bool contains_text(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

bool passes(const Held& h, const ViewState& state) {
  const proc::Holder& p = *h.holder;
  if (state.orphans_only && !proc::stray(p) && !p.zombie_leader) return false;
  if (state.gpu && !gpu::contains(h.gpus, *state.gpu)) return false;
  if (!state.text.empty() && !contains_text(p.user, state.text) &&
      !contains_text(p.cmdline, state.text) && !contains_text(p.comm, state.text) &&
      !contains_text(p.instance, state.text) && !contains_text(p.container, state.text))
    return false;
  return true;
}

// Orders by the sort key, then by pid so that equal keys keep a stable order.
bool holder_before(const Held& a, const Held& b, SortKey key) {
  switch (key) {
    case SortKey::memory:
      if (a.bytes != b.bytes) return a.bytes > b.bytes;
      break;
    case SortKey::age:
      if (a.holder->id.start_time != b.holder->id.start_time)
        return a.holder->id.start_time < b.holder->id.start_time;
      break;
    case SortKey::gpu:
      if (a.gpus != b.gpus) return a.gpus < b.gpus;
      break;
    case SortKey::pid:
      break;
  }
  return a.holder->id.pid < b.holder->id.pid;
}

// A group of rows: an instance (heading + members) or a lone holder.
struct Group {
  const inventory::Instance* in = nullptr;  // null: a holder without a heading
  std::vector<Held> members;
  std::size_t first_gpu_order = 0;  // the instance list's own order (by first GPU, key)
};

// A group's members (already sorted) depth first by parent: each member's children that
// are members too right under it, in the same order. Returns the members so ordered, each
// with its tree_last (Row::tree_last). A member in a parent cycle (impossible in /proc;
// hand-built inventories) stays a top member.
std::vector<std::pair<const Held*, std::vector<bool>>> as_tree(const std::vector<Held>& members) {
  std::map<pid_t, std::size_t> at;  // pid -> index in members
  for (std::size_t i = 0; i < members.size(); ++i) at[members[i].holder->id.pid] = i;
  std::vector<std::vector<std::size_t>> children(members.size());
  std::vector<bool> top(members.size(), true);
  for (std::size_t i = 0; i < members.size(); ++i) {
    auto parent = at.find(members[i].holder->ppid);
    if (parent == at.end() || parent->second == i) continue;
    children[parent->second].push_back(i);
    top[i] = false;
  }
  std::vector<std::pair<const Held*, std::vector<bool>>> out;
  std::vector<bool> placed(members.size(), false);
  auto visit = [&](auto&& self, std::size_t i, std::vector<bool> path) -> void {
    placed[i] = true;
    out.emplace_back(&members[i], path);
    const auto& kids = children[i];
    for (std::size_t k = 0; k < kids.size(); ++k) {
      if (placed[kids[k]]) continue;
      auto below = path;
      below.push_back(k + 1 == kids.size());
      self(self, kids[k], std::move(below));
    }
  };
  for (std::size_t i = 0; i < members.size(); ++i)
    if (top[i]) visit(visit, i, {});
  for (std::size_t i = 0; i < members.size(); ++i)  // a parent cycle: no top to start from
    if (!placed[i]) visit(visit, i, {});
  return out;
}

// Every holder that uses a GPU, once, with all the GPUs it uses.
std::map<proc::ProcessId, Held> held_once(const inventory::Inventory& inv) {
  std::map<proc::ProcessId, Held> held;
  for (const auto& v : inv.gpus)
    for (const auto& gh : v.holders) {
      if (!gh.uses_gpu) continue;
      Held& h = held[gh.holder.id];
      h.holder = &gh.holder;
      h.gpus.push_back(v.info.id);
      if (gh.gpu_bytes)
        h.bytes += *gh.gpu_bytes;
      else
        h.bytes_known = false;
      if (gh.sm_percent) h.sm_percent = std::max(h.sm_percent.value_or(0), *gh.sm_percent);
    }
  return held;
}

// The holders that pass the view's filters, by instance (those worth a heading), the
// rest a group each; members sorted.
std::vector<Group> grouped(const inventory::Inventory& inv, const ViewState& state) {
  std::vector<Group> groups;
  std::map<std::string, std::size_t> group_of;  // instance key -> groups index
  for (std::size_t i = 0; i < inv.instances.size(); ++i) {
    const auto& in = inv.instances[i];
    if (!report::worth_showing(in)) continue;
    group_of[in.key] = groups.size();
    groups.push_back({&in, {}, i});
  }
  for (auto& [id, h] : held_once(inv)) {
    if (!passes(h, state)) continue;
    auto it = group_of.find(h.holder->instance);
    if (it != group_of.end()) {
      groups[it->second].members.push_back(h);
    } else {
      Group g;
      g.members.push_back(h);
      g.first_gpu_order = inv.instances.size();  // after the instances, by the sort below
      groups.push_back(std::move(g));
    }
  }
  std::erase_if(groups, [](const Group& g) { return g.members.empty(); });
  for (auto& g : groups)
    std::sort(g.members.begin(), g.members.end(),
              [&](const Held& a, const Held& b) { return holder_before(a, b, state.sort); });
  return groups;
}

// Groups by the same key as their first member (members are sorted already); the
// default keeps the instances' own order (first GPU, then key). Reversed: the groups,
// and each group's members, in the other order (a member's children stay under it:
// as_tree keeps the tree).
void sort_groups(std::vector<Group>& groups, const ViewState& state) {
  auto total = [](const Group& g) {
    std::uint64_t sum = 0;
    for (const auto& m : g.members) sum += m.bytes;
    return sum;
  };
  std::stable_sort(groups.begin(), groups.end(), [&](const Group& a, const Group& b) {
    switch (state.sort) {
      case SortKey::memory:
        if (total(a) != total(b)) return total(a) > total(b);
        break;
      case SortKey::gpu:
        if (a.members.front().gpus != b.members.front().gpus)
          return a.members.front().gpus < b.members.front().gpus;
        if (a.first_gpu_order != b.first_gpu_order) return a.first_gpu_order < b.first_gpu_order;
        break;
      case SortKey::age:
      case SortKey::pid:
        break;
    }
    return holder_before(a.members.front(), b.members.front(), state.sort);
  });
  if (state.reverse) {
    std::reverse(groups.begin(), groups.end());
    for (auto& g : groups) std::reverse(g.members.begin(), g.members.end());
  }
}

Row instance_heading(const Group& g, const ViewState& state) {
  bool all_tagged = true;
  for (const auto& m : g.members) all_tagged = all_tagged && state.tagged.contains(m.holder->id);
  Row heading;
  heading.kind = Row::Kind::instance;
  heading.id = "i:" + g.in->key;
  heading.instance = g.in->key;
  heading.in = g.in;
  for (const auto& m : g.members) heading.members.push_back(m.holder->id);
  heading.collapsed = state.collapsed.contains(g.in->key);
  heading.tagged = all_tagged;
  return heading;
}

}  // namespace

std::string_view enum_name(SortKey key) {
  switch (key) {
    case SortKey::gpu:
      return "gpu";
    case SortKey::memory:
      return "memory";
    case SortKey::age:
      return "age";
    case SortKey::pid:
      return "pid";
  }
  return {};
}

std::string row_id(const proc::ProcessId& id) {
  return fmt::format("p:{}:{}", id.pid, id.start_time);
}

std::vector<Row> build_rows(const inventory::Inventory& inv, const ViewState& state) {
  std::vector<Group> groups = grouped(inv, state);
  sort_groups(groups, state);
  std::vector<Row> rows;
  for (const auto& g : groups) {
    if (g.in) {
      rows.push_back(instance_heading(g, state));
      if (rows.back().collapsed) continue;
    }
    for (const auto& [member, tree_last] : as_tree(g.members)) {
      const Held& m = *member;
      Row r;
      r.kind = Row::Kind::holder;
      r.id = row_id(m.holder->id);
      r.instance = m.holder->instance;
      r.holder = m.holder;
      r.gpus = m.gpus;
      r.bytes = m.bytes;
      r.bytes_known = m.bytes_known;
      r.sm_percent = m.sm_percent;
      r.nested = g.in != nullptr;
      r.tagged = state.tagged.contains(m.holder->id);
      if (g.in) r.tree_last = tree_last;
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

std::vector<proc::ProcessId> row_processes(const std::vector<Row>& rows, std::size_t at) {
  if (at >= rows.size()) return {};
  if (rows[at].kind == Row::Kind::instance) return rows[at].members;
  return {rows[at].holder->id};
}

}  // namespace gpureap::top
