#include "audit/journal.h"

#include <sys/uio.h>
#include <syslog.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string_view>

#include "report/terminal_text.h"
#include "util/libsystemd.h"

#ifdef GPUREAP_HAVE_SD_JOURNAL
#include <systemd/sd-journal.h>
#endif

namespace gpureap::audit {
namespace {

constexpr const char* kJournalSocket = "/run/systemd/journal/socket";

std::string_view value_of(std::string_view field) {
  auto eq = field.find('=');
  return eq == std::string_view::npos ? std::string_view() : field.substr(eq + 1);
}

std::string_view name_of(std::string_view field) {
  return field.substr(0, field.find('='));
}

// The record's PRIORITY field, as syslog(3) wants it (notice when absent).
int priority_of(const std::vector<std::string>& fields) {
  for (const auto& f : fields)
    if (name_of(f) == "PRIORITY") {
      auto v = value_of(f);
      if (v.size() == 1 && v[0] >= '0' && v[0] <= '7') return v[0] - '0';
    }
  return LOG_NOTICE;
}

void send_to_syslog(const std::vector<std::string>& fields) {
  const std::string text = syslog_text(fields);
  // ident, facility and option are process-wide in glibc: set for this record and
  // closed again, so nothing else in the process inherits them.
  ::openlog("gpureap", LOG_PID, LOG_AUTHPRIV);
  ::syslog(LOG_AUTHPRIV | priority_of(fields), "%s", text.c_str());
  ::closelog();
}

#ifdef GPUREAP_HAVE_SD_JOURNAL
// sd_journal_sendv, resolved in libsystemd.so.0 (util/libsystemd.h) at the first record.
class Libsystemd {
 public:
  using SendV = decltype(&::sd_journal_sendv);
  SendV sendv() {
    if (!tried_) {
      tried_ = true;
      sendv_ = reinterpret_cast<SendV>(libsystemd_symbol("sd_journal_sendv", &error_));
    }
    return sendv_;
  }
  const std::string& error() const { return error_; }

 private:
  bool tried_ = false;
  SendV sendv_ = nullptr;
  std::string error_;
};
#endif

}  // namespace

bool built_with_journal() {
#ifdef GPUREAP_HAVE_SD_JOURNAL
  return true;
#else
  return false;
#endif
}

std::string syslog_text(const std::vector<std::string>& fields) {
  std::string message, rest;
  for (const auto& f : fields) {
    const auto name = name_of(f);
    if (name == "MESSAGE") {
      message = report::terminal_text(value_of(f));
      continue;
    }
    if (!name.starts_with("GPUREAP_")) continue;
    std::string value = report::terminal_text(value_of(f));
    if (value.empty() || value.find_first_of(" \"[]") != std::string::npos) {
      std::string quoted = "\"";
      for (char c : value) {
        if (c == '"' || c == '\\') quoted += '\\';
        quoted += c;
      }
      value = quoted + "\"";
    }
    rest += (rest.empty() ? "" : " ") + std::string(name) + "=" + value;
  }
  return rest.empty() ? message : message + " [" + rest + "]";
}

JournalSend system_journal() {
#ifdef GPUREAP_HAVE_SD_JOURNAL
  auto lib = std::make_shared<Libsystemd>();
  return [lib](const std::vector<std::string>& fields) -> Result<void> {
    // No journald here (a container, a system without systemd): syslog(3) it is, and
    // that is no failure.
    if (::access(kJournalSocket, W_OK) != 0) {
      send_to_syslog(fields);
      return {};
    }
    auto sendv = lib->sendv();
    if (!sendv) {
      send_to_syslog(fields);
      return fail(lib->error() + "; audit records go to syslog instead of the journal");
    }
    std::vector<iovec> iov;
    iov.reserve(fields.size());
    for (const auto& f : fields)
      iov.push_back(iovec{const_cast<char*>(f.data()), f.size()});  // NOLINT: sendv reads only
    int rc = sendv(iov.data(), static_cast<int>(iov.size()));
    if (rc < 0) {
      send_to_syslog(fields);
      return fail(std::string("the journal refused an audit record: ") + std::strerror(-rc) +
                  "; it went to syslog instead");
    }
    return {};
  };
#else
  return [](const std::vector<std::string>& fields) -> Result<void> {
    send_to_syslog(fields);
    return {};
  };
#endif
}

}  // namespace gpureap::audit
