#include "services/coordinator/http_server.h"

#include <fcntl.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.h"

namespace tandem::coordinator {

const char* http_status_text(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

bool HttpResponder::write_all(std::string_view bytes) {
  while (!bytes.empty() && !gone_) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      gone_ = true;
      break;
    }
    bytes.remove_prefix(size_t(n));
  }
  return !gone_;
}

bool HttpResponder::peer_closed() {
  if (gone_) return true;
  char c;
  ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) gone_ = true;
  return gone_;
}

bool HttpResponder::send(int status, std::string_view content_type, std::string_view body) {
  answered_ = true;
  std::string head = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", status,
      http_status_text(status), content_type, body.size());
  return write_all(head) && write_all(body);
}

bool HttpResponder::start_events() {
  answered_ = true;
  return write_all(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
      "Connection: close\r\n\r\n");
}

bool HttpResponder::event(std::string_view data) {
  std::string e;
  e.reserve(data.size() + 8);
  e.append("data: ").append(data).append("\n\n");
  return write_all(e);
}

HttpServer HttpServer::listen(const HttpServerOptions& o) {
  HttpServer s;
  s.options_ = o;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(o.port));
  if (::inet_pton(AF_INET, o.host.c_str(), &addr.sin_addr) != 1)
    fail_invalid("--host '{}': expected an IPv4 address such as 127.0.0.1", o.host);
  FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw Error(ErrorKind::kSystem, fmt::format("socket: {}", std::strerror(errno)), errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw Error(ErrorKind::kSystem, fmt::format("bind {}:{}: {}", o.host, o.port, std::strerror(errno)), errno);
  if (::listen(fd.get(), 128) != 0)
    throw Error(ErrorKind::kSystem, fmt::format("listen {}:{}: {}", o.host, o.port, std::strerror(errno)), errno);
  socklen_t len = sizeof addr;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  s.port_ = ntohs(addr.sin_port);
  s.listener_ = std::move(fd);
  return s;
}

HttpServer HttpServer::adopt(int fd, const HttpServerOptions& o) {
  HttpServer s;
  s.options_ = o;
  int listening = 0;
  socklen_t olen = sizeof listening;
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &olen) != 0 || !listening ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.sin_family != AF_INET)
    fail_invalid("file descriptor {} is not a listening TCP socket", fd);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // not passed on to this process's children
  s.port_ = ntohs(addr.sin_port);
  s.listener_ = FileDescriptor(fd);
  return s;
}

HttpServer::~HttpServer() = default;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Reads one request; on a protocol problem answers it and returns false.
bool read_request(int fd, const HttpServerOptions& o, HttpRequest& req, HttpResponder& out) {
  std::string buf;
  size_t header_end = std::string::npos;
  char chunk[8192];
  // One deadline for the whole request: a client trickling a byte per
  // timeout must not hold a connection slot for long.
  const auto deadline = std::chrono::steady_clock::now() + o.read_timeout;
  auto late = [&] { return std::chrono::steady_clock::now() > deadline; };
  auto error = [&](int status, const std::string& msg) {
    out.send_json(status, fmt::format(R"({{"error":{{"message":"{}","type":"invalid_request_error","param":null,"code":null}}}})", msg));
    return false;
  };
  while (header_end == std::string::npos) {
    ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return error(408, "timed out reading the request");
    if (n <= 0) return false;  // closed before a request
    buf.append(chunk, size_t(n));
    if (late()) return error(408, "timed out reading the request");
    header_end = buf.find("\r\n\r\n");
    if (header_end == std::string::npos && buf.size() > o.max_header_bytes)
      return error(431, "request headers too large");
  }
  std::string_view head(buf.data(), header_end);
  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1 || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0)
    return error(400, "malformed request line");
  req.method = std::string(line.substr(0, sp1));
  std::string target(line.substr(sp1 + 1, sp2 - sp1 - 1));
  size_t q = target.find('?');
  req.path = target.substr(0, q);
  if (q != std::string::npos) req.query = target.substr(q + 1);
  while (eol != std::string_view::npos && eol < head.size()) {
    size_t next = head.find("\r\n", eol + 2);
    std::string_view h = head.substr(eol + 2, next == std::string_view::npos ? std::string_view::npos : next - eol - 2);
    eol = next;
    size_t colon = h.find(':');
    if (colon == std::string_view::npos) return error(400, "malformed header line");
    req.headers[lower(std::string(trim(h.substr(0, colon))))] = std::string(trim(h.substr(colon + 1)));
  }
  if (!req.header("transfer-encoding").empty()) return error(501, "chunked request bodies are not supported; send Content-Length");
  size_t length = 0;
  if (std::string cl = req.header("content-length"); !cl.empty()) {
    try {
      size_t used = 0;
      unsigned long long v = std::stoull(cl, &used);
      if (used != cl.size()) throw std::invalid_argument("trailing");
      length = size_t(v);
    } catch (const std::exception&) {
      return error(400, "malformed Content-Length");
    }
  }
  if (length > o.max_body_bytes) return error(413, fmt::format("request body over {} bytes", o.max_body_bytes));
  req.body = buf.substr(header_end + 4);
  while (req.body.size() < length) {
    ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return error(408, "timed out reading the request body");
    if (n <= 0) return false;
    req.body.append(chunk, size_t(n));
    if (late() && req.body.size() < length) return error(408, "timed out reading the request body");
  }
  req.body.resize(length);
  return true;
}

}  // namespace

void HttpServer::serve(const HttpHandler& handler, const std::atomic<bool>& stop) {
  std::mutex mu;
  std::condition_variable cv;
  int active = 0;
  while (!stop.load()) {
    pollfd p{listener_.get(), POLLIN, 0};
    int r = ::poll(&p, 1, 200);
    if (r <= 0) continue;
    int c = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    FileDescriptor conn(c);
    {
      std::unique_lock lock(mu);
      if (active >= options_.max_connections) {
        HttpResponder(conn.get()).send_json(503, R"({"error":{"message":"too many connections","type":"server_error","param":null,"code":null}})");
        continue;
      }
      ++active;
    }
    // A client that stops reading (or vanishes) must not block a send, and
    // with it the generator, for longer than this.
    timeval tv{long(options_.read_timeout.count()), 0};
    ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(conn.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::thread([&, fd = std::move(conn)]() mutable {
      HttpResponder out(fd.get());
      try {
        HttpRequest req;
        if (read_request(fd.get(), options_, req, out)) handler(req, out);
      } catch (const std::exception& e) {
        spdlog::error("request failed: {}", e.what());
        if (!out.answered())
          out.send_json(500, R"({"error":{"message":"internal error","type":"server_error","param":null,"code":null}})");
      }
      ::shutdown(fd.get(), SHUT_WR);
      // Read what the client still sends (a body we refused) for a moment,
      // so that closing does not reset the connection before it reads our
      // answer.
      timeval drain{0, 200000};
      ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &drain, sizeof drain);
      char sink[16384];
      for (size_t total = 0; total < (1u << 20);) {
        ssize_t n = ::recv(fd.get(), sink, sizeof sink, 0);
        if (n <= 0) break;
        total += size_t(n);
      }
      fd = FileDescriptor();
      std::lock_guard lock(mu);
      --active;
      cv.notify_all();
    }).detach();
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return active == 0; });
}

}  // namespace tandem::coordinator
