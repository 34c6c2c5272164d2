#include "job_identity.hpp"

#include <unistd.h>

#include <cstdlib>

namespace kc {

namespace {

// The first of `names` that is set to a non-negative integer: its value and name.
int64_t first_int(std::initializer_list<const char*> names, std::string* which = nullptr) {
  for (const char* n : names) {
    const char* v = std::getenv(n);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    if (end && *end == 0 && x >= 0) {
      if (which) *which = n;
      return x;
    }
  }
  return -1;
}

}  // namespace

JobIdentity JobIdentity::from_env() {
  JobIdentity j;
  // RANK (torchrun) first: it is global where LOCAL_RANK is per node; LOCAL_RANK next
  // for single-node launchers that set only it; then Open MPI and Slurm.
  j.rank = first_int({"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, &j.rank_var);
  j.world_size = first_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "SLURM_NPROCS"});
  j.local_rank = first_int({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"});
  j.pid = int(getpid());
  return j;
}

SelectionVerdict select_process(const Config& cfg, const JobIdentity& job) {
  SelectionVerdict v;
  const std::string me = "process " + std::to_string(job.pid);
  if (cfg.want_rank >= 0) {
    const std::string want = std::to_string(cfg.want_rank);
    if (job.rank < 0) {
      v.selected = false;
      v.why_not = me + " has no rank variable";
      v.errors.emplace_back("no_rank", me + " sets none of RANK, LOCAL_RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID");
    } else if (job.world_size >= 0 && cfg.want_rank >= job.world_size) {
      v.selected = false;
      v.why_not = "rank " + want + " is beyond the world size";
      v.errors.emplace_back("rank_out_of_range", "--rank " + want + " but the job's world size is " +
                                                     std::to_string(job.world_size) + " (ranks 0-" +
                                                     std::to_string(job.world_size - 1) + ", " + me + " is rank " +
                                                     std::to_string(job.rank) + ")");
      v.fatal = true;
    } else if (job.rank != cfg.want_rank) {
      v.selected = false;
      v.why_not = me + " is rank " + std::to_string(job.rank) + " (" + job.rank_var + ")";
    }
  }
  if (cfg.want_pid >= 0) {
    const bool pid_ok = job.pid == cfg.want_pid;
    if (cfg.want_rank >= 0 && job.rank >= 0 && pid_ok != (job.rank == cfg.want_rank)) {
      // One process is the requested pid, another the requested rank: they disagree.
      v.errors.emplace_back("selection_conflict",
                            pid_ok ? "--pid " + std::to_string(cfg.want_pid) + " is rank " + std::to_string(job.rank) +
                                         " (" + job.rank_var + "), not --rank " + std::to_string(cfg.want_rank)
                                   : "--rank " + std::to_string(cfg.want_rank) + " is " + me + ", not --pid " +
                                         std::to_string(cfg.want_pid));
      v.fatal = true;
      v.selected = false;
      v.why_not = "--rank and --pid disagree";
    } else if (!pid_ok) {
      v.selected = false;
      if (v.why_not.empty()) v.why_not = me + " is not --pid " + std::to_string(cfg.want_pid);
    }
  }
  return v;
}

}  // namespace kc
