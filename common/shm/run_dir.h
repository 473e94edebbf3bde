// The run directory: one private folder per run (0700, owned by this user) that
// holds every shared-memory file and socket of that run, so that stopping the
// run — or sweeping it after its owner died — is one recursive removal.
//
//   <base>/run-<pid>-<start_ticks>-<nonce>/
//
// <base> defaults to /dev/shm/tandem-<uid> (TANDEM_RUN_BASE overrides it). The
// owner's pid and start time are part of the name, so a later run can tell,
// without reading anything the dead run may have half-written, whether that
// run's owner is still alive; if not, create() removes it ("sweeps" it).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/shm/process.h"

namespace tandem {

// The default base for run directories: $TANDEM_RUN_BASE, else
// /dev/shm/tandem-<uid>.
std::string default_run_base();

// Creates base (mode 0700) if missing and checks that it is a real directory,
// owned by this user and private; throws tandem::Error otherwise.
void ensure_private_dir(const std::string& path);

// Removes the run directories under each base whose owner process is dead;
// returns the paths removed. Entries that are not run directories are left.
std::vector<std::string> sweep_dead_runs(const std::vector<std::string>& bases);

class RunDirectory {
 public:
  RunDirectory() = default;
  RunDirectory(RunDirectory&& o) noexcept;
  RunDirectory& operator=(RunDirectory&& o) noexcept;
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;
  // The owner removes the directory and everything in it.
  ~RunDirectory();

  // Sweeps dead runs under `base` and creates a new run directory owned by
  // this process.
  static RunDirectory create(const std::string& base = default_run_base());
  // Uses an existing run directory without owning it (workers); checks that
  // it is a private directory of this user.
  static RunDirectory attach(const std::string& path);

  const std::string& path() const { return path_; }
  // "<path>/<name>".
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // The run's name (the last path component), shared by its directories on
  // other file systems (hugetlbfs).
  std::string name() const;
  bool owner() const { return owner_; }
  // The process that owns this run, from the directory name.
  ProcessId owner_process() const;

  // Removes the directory now (owner only); idempotent.
  void remove();

 private:
  std::string path_;
  bool owner_ = false;
};

// Parses a run directory name; nullopt if `name` is not one.
std::optional<ProcessId> run_owner_from_name(const std::string& name);

}  // namespace tandem
