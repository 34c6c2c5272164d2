// Which process of a multi-process job this is (rank, world size, local rank from the
// launcher's environment), and whether it is the one selected to capture
// (KERNCAP_RANK / KERNCAP_PID). Decided once at injection: a process that is not
// selected enables no callback at all, so it never counts a dispatch and pays nothing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"

namespace kc {

struct JobIdentity {
  int64_t rank = -1;          // -1: no rank variable set
  std::string rank_var;       // which variable gave it (RANK, LOCAL_RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID)
  int64_t world_size = -1;    // WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS
  int64_t local_rank = -1;    // LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID
  int pid = 0;

  static JobIdentity from_env();
};

struct SelectionVerdict {
  bool selected = true;
  std::string why_not;  // when not selected: why, for the report
  // Problems with the request itself, as (kind, message) report errors. `fatal`: the
  // request cannot be met in this job at all (the engine stops the app).
  std::vector<std::pair<std::string, std::string>> errors;
  bool fatal = false;
};

// KERNCAP_RANK / KERNCAP_PID against this process. (KERNCAP_DEVICE is checked per
// launch: one process may use several devices.)
SelectionVerdict select_process(const Config& cfg, const JobIdentity& job);

}  // namespace kc
