// A small HTTP/1.1 server for the coordinator's OpenAI-compatible API: one
// request per connection (answered with "Connection: close"), a thread per
// connection up to a limit, bounded header and body sizes, read timeouts,
// and server-sent events for streaming. Listens on 127.0.0.1 unless told
// otherwise. No TLS: put a reverse proxy in front for remote access.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "common/mapped_file.h"

namespace tandem::coordinator {

struct HttpRequest {
  std::string method, path, query;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// The handler's way to answer: either one send(), or start_events() followed
// by events. Writes return false once the client has gone away (the
// handler should then stop generating: that is cancellation).
class HttpResponder {
 public:
  explicit HttpResponder(int fd) : fd_(fd) {}
  bool send(int status, std::string_view content_type, std::string_view body);
  bool send_json(int status, std::string_view json) { return send(status, "application/json", json); }
  bool start_events();
  bool event(std::string_view data);  // "data: <data>\n\n"
  bool answered() const { return answered_; }
  bool client_gone() const { return gone_; }
  // Non-blocking: true once the client has closed its side (it went away).
  bool peer_closed();

 private:
  bool write_all(std::string_view bytes);
  int fd_;
  bool answered_ = false, gone_ = false;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponder&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see port())
  size_t max_header_bytes = 64 << 10;
  size_t max_body_bytes = 16 << 20;
  std::chrono::seconds read_timeout{30};
  int max_connections = 64;
};

class HttpServer {
 public:
  // Binds and listens; throws tandem::Error(kSystem) naming host:port and errno.
  static HttpServer listen(const HttpServerOptions& o);
  // Takes a socket that already listens (inherited from the launcher, so
  // that a restarted coordinator serves the same port and connections made
  // meanwhile wait in its backlog); throws kInvalidInput if it is not one.
  static HttpServer adopt(int fd, const HttpServerOptions& o);
  // The listening socket, e.g. to hand to a child process.
  int fd() const { return listener_.get(); }
  HttpServer(HttpServer&&) noexcept = default;
  ~HttpServer();
  int port() const { return port_; }

  // Accepts until `stop` is set (checked every 200 ms), then waits for the
  // connections in progress to finish.
  void serve(const HttpHandler& handler, const std::atomic<bool>& stop);

 private:
  HttpServer() = default;
  HttpServerOptions options_;
  FileDescriptor listener_;
  int port_ = 0;
};

// "Reason phrase" of a status code.
const char* http_status_text(int status);

}  // namespace tandem::coordinator
