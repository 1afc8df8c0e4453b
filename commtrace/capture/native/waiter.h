// The thread that waits for ops nothing else can time (Waiter).
#pragma once
#include "op.h"

namespace ct {

// Ops whose work has neither a future nor a working isCompleted() (gloo's
// tensor reduce-scatter) are waited for here, one after another, like
// capture/completion.py's _Waiter. Collective works tolerate this second wait().
class Waiter {
 public:
  void add(Pending p) {
    std::lock_guard<std::mutex> g(mu_);
    q_.push_back(std::move(p));
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();  // lives as long as the process (the Log is never freed)
    }
    cv_.notify_one();
  }

 private:
  void run() {
    for (;;) {
      Pending p;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [this] { return !q_.empty(); });
        p = std::move(q_.front());
        q_.pop_front();
      }
      try {
        p.work->wait();
      } catch (...) {
        p.op->error = error_text(std::current_exception());
        p.op->status = STATUS_FAILED;
      }
      p.op->t_end = now_ns();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> q_;
  bool started_ = false;
};

}  // namespace ct
