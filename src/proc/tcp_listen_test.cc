// The kernel's listening sockets through sock_diag: a socket this test listens on is
// found with its inode and port; one that only connects is not.

#include "proc/tcp_listen.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace gpureap::proc {
namespace {

TEST(ListeningTcpSockets, AListeningSocketIsFoundWithItsInodeAndPort) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  auto before = listening_tcp_sockets();
  ASSERT_TRUE(before) << before.error().message;
  auto is_ours = [&](const ListeningSocket& s) { return s.inode == st.st_ino; };
  EXPECT_TRUE(std::none_of(before->begin(), before->end(), is_ours)) << "bound, not listening";
  ASSERT_EQ(::listen(fd, 4), 0);
  auto after = listening_tcp_sockets();
  ASSERT_TRUE(after) << after.error().message;
  auto it = std::find_if(after->begin(), after->end(), is_ours);
  ASSERT_NE(it, after->end());
  EXPECT_EQ(it->port, ntohs(addr.sin_port));
  ::close(fd);
}

}  // namespace
}  // namespace gpureap::proc
