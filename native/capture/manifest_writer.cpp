#include "manifest_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "func_attributes.hpp"
#include "provenance_util.hpp"

extern char** environ;

#ifndef KERNCAP_TOOL_VERSION
#define KERNCAP_TOOL_VERSION "0.1.0"
#endif

namespace kc {

Provenance process_provenance(const Config& cfg, const std::string& time_utc) {
  Provenance p;
  if (cfg.command_json.empty() || !parse_json_string_list(cfg.command_json, p.command)) p.command = process_cmdline();
  char cwd[4096];
  p.cwd = getcwd(cwd, sizeof cwd) ? std::string(cwd) : std::string();
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && kept_env(kv.substr(0, eq))) p.env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  std::sort(p.env.begin(), p.env.end());
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  p.host = host;
  p.pid = int(getpid());
  p.time_utc = time_utc;
  p.pattern = cfg.kernel;
  p.match_mode = match_mode_name(cfg.match);
  return p;
}

void write_provenance(JsonWriter& w, const Provenance& p) {
  w.key("provenance").begin_object();
  w.field("tool_version", KERNCAP_TOOL_VERSION);
  w.key("command").begin_array();
  for (const std::string& a : p.command) w.value(a);
  w.end_array();
  w.field("cwd", p.cwd);
  w.key("env").begin_object();
  for (const auto& [k, v] : p.env) w.field(k, v);
  w.end_object();
  w.field("host", p.host).field("pid", p.pid).field("time", p.time_utc);
  w.key("gpu").begin_object().field("name", p.gpu.name);
  w.key("cc").begin_array().value(p.gpu.cc_major).value(p.gpu.cc_minor).end_array();
  w.field("uuid", p.gpu.uuid).field("driver_version", p.gpu.driver_version).field("ordinal", p.gpu.ordinal);
  w.end_object();
  w.field("dispatch_index", p.dispatch_index);
  if (!p.interception.empty()) w.field("interception", p.interception);
  if (p.job) {
    w.key("job").begin_object().field("rank", p.job->rank).field("rank_var", p.job->rank_var);
    w.field("world_size", p.job->world_size).field("local_rank", p.job->local_rank).end_object();
  }
  if (p.bucket) w.field("bucket", *p.bucket);
  w.key("match").begin_object().field("pattern", p.pattern).field("mode", p.match_mode).end_object();
  w.key("capture_seconds").begin_object().field("pre", p.pre_s).field("post", p.post_s).field("total", p.total_s);
  if (p.window_s) w.field("window", *p.window_s);
  w.end_object();
  w.key("bytes").begin_object().field("logical", p.logical).field("snapshotted", p.snapshotted);
  w.field("unchanged", p.unchanged).field("zero", p.zero).field("stored", p.stored).end_object();
  w.end_object();
}

namespace {

struct Hit {
  uint64_t at;
  int index;
  uint64_t offset;
};

// Annotation only (the bytes stay as captured): the aligned 8-byte words of a parameter
// that point into a region or, by the device pointer the kernel was given, a host region.
void write_pointers(JsonWriter& w, const ParamSlot& p, const unsigned char* bytes, const ClosureTargets& targets) {
  std::vector<Hit> hits, host_hits;
  for (uint64_t at = (8 - p.offset % 8) % 8; at + 8 <= p.size; at += 8) {
    uint64_t v;
    std::memcpy(&v, bytes + at, 8);
    const TargetHit t = targets.find(v);
    if (t.kind == TargetHit::kRegion) hits.push_back(Hit{at, t.index, t.offset});
    else if (t.kind == TargetHit::kHost) host_hits.push_back(Hit{at, t.index, t.offset});
  }
  if (p.size == 8 && hits.size() == 1) {
    w.key("pointer").begin_object().field("region", hits[0].index).field("offset", hits[0].offset).end_object();
  } else if (!hits.empty()) {
    w.key("pointers").begin_array();
    for (const Hit& h : hits)
      w.begin_object().field("at", h.at).field("region", h.index).field("offset", h.offset).end_object();
    w.end_array();
  }
  if (!host_hits.empty()) {
    w.key("host_pointers").begin_array();
    for (const Hit& h : host_hits)
      w.begin_object().field("at", h.at).field("host_region", h.index).field("offset", h.offset).end_object();
    w.end_array();
  }
}

const std::vector<ChunkHash>& chunks_or(const ItemSnapshot* s, const std::vector<ChunkHash>& otherwise) {
  return s ? s->chunks : otherwise;
}

void write_states(JsonWriter& w, const ItemStates& s, uint64_t size) {
  const std::vector<ChunkHash> zeros(size_t((size + Snapshotter::kChunkSize - 1) / Snapshotter::kChunkSize));
  const std::vector<ChunkHash>& pre = chunks_or(s.pre, zeros);
  const std::vector<ChunkHash>& post = chunks_or(s.post, pre);
  w.field("written", pre != post);
  w.field("zero_fraction", s.pre && size ? double(s.pre->zero_bytes) / double(size) : 1.0);
  w.key("pre");
  write_hashes(w, pre);
  w.key("post");
  write_hashes(w, post);
}

}  // namespace

void write_params(JsonWriter& w, const ParamCapture& pc, const ClosureTargets& targets, const HandleWriter& handle) {
  const auto& buf = pc.buffer;
  w.key("params").begin_array();
  for (const ParamSlot& p : pc.params) {
    w.begin_object().field("index", p.index).field("offset", p.offset).field("size", p.size);
    const bool in_buffer = p.offset + p.size <= buf.size();
    w.field("value", in_buffer ? to_hex(buf.data() + p.offset, p.size) : std::string());
    if (in_buffer && p.size >= 8) write_pointers(w, p, buf.data() + p.offset, targets);
    if (handle) handle(w, p.index);
    w.end_object();
  }
  w.end_array();
  w.field("param_buffer", to_hex(buf.data(), buf.size()));
}

void write_launch_config(JsonWriter& w, const unsigned grid[3], const unsigned block[3], unsigned shared_mem,
                         const char* stream, bool cooperative, const std::vector<CUlaunchAttribute>& attrs,
                         const std::string& param_form) {
  w.key("grid").begin_array().value(grid[0]).value(grid[1]).value(grid[2]).end_array();
  w.key("block").begin_array().value(block[0]).value(block[1]).value(block[2]).end_array();
  w.field("shared_mem_bytes", shared_mem).field("stream", stream).field("cooperative", cooperative);
  w.key("attributes").begin_array();
  for (const CUlaunchAttribute& a : attrs)
    w.begin_object().field("id", int(a.id)).field("value", to_hex(&a.value, sizeof a.value)).end_object();
  w.end_array();
  w.field("param_form", param_form);
}

void write_region(JsonWriter& w, size_t id, const ManifestRegion& m) {
  const TrackedRegion& r = *m.region;
  w.begin_object().field("id", uint64_t(id)).field("base", r.base).field("size", r.size);
  w.field("api", r.api).field("kind", r.kind);
  if (!m.states.pre) w.field("sequence_state", "allocated");
  else if (!m.states.post) w.field("sequence_state", "freed");
  if (r.reserve_base)
    w.key("reservation").begin_object().field("base", r.reserve_base).field("size", r.reserve_size).end_object();
  if (r.physical)  // one physical allocation mapped here and elsewhere (memory_tracker.hpp)
    w.key("physical").begin_object().field("allocation", r.physical).field("offset", r.physical_offset).end_object();
  write_states(w, m.states, r.size);
  w.end_object();
}

void write_host_region(JsonWriter& w, size_t id, const ManifestHost& m) {
  const HostItem& hi = *m.item;
  const HostRegion& r = hi.region;
  w.begin_object().field("id", uint64_t(id)).field("base", r.base).field("size", r.size).field("api", r.api);
  w.field("flags", uint64_t(r.flags));
  if (hi.device_pointer) w.field("device_pointer", hi.device_pointer);
  else w.key("device_pointer").null();
  w.field("snapshotted", hi.snapshot);
  if (hi.snapshot && m.states.pre) write_states(w, m.states, r.size);
  else w.field("why_not", hi.why_not);
  w.end_object();
}

void write_global(JsonWriter& w, const ManifestGlobal& m) {
  const CapturedGlobal& g = *m.global;
  w.begin_object().field("name", g.name).field("section", g.section).field("size", g.size);
  w.field("address", g.address);
  if (g.module >= 0) w.field("module", uint64_t(g.module));
  const std::vector<ChunkHash> none;
  const std::vector<ChunkHash>& pre = chunks_or(m.states.pre, none);
  const std::vector<ChunkHash>& post = chunks_or(m.states.post, pre);
  w.field("written", pre != post);
  w.key("pre");
  write_hashes(w, pre);
  w.key("post");
  write_hashes(w, post);
  w.end_object();
}

void write_closure(JsonWriter& w, const ClosureCheck& c) {
  w.key("closure").begin_object().field("words_checked", c.words_checked);
  w.key("unresolved").begin_array();
  for (const Unresolved& u : c.unresolved) {
    w.begin_object();
    if (u.launch >= 0) w.field("launch", uint64_t(u.launch));
    w.field("param", uint64_t(u.param)).field("at", u.at).field("value", u.value).field("reason", u.reason);
    w.end_object();
  }
  w.end_array().end_object();
}

std::string manifest_json(const ManifestView& v) {
  JsonWriter w;
  w.begin_object();
  w.field("format", "kerncap-capture").field("format_version", 1).field("complete", true);
  w.field("chunk_size", uint64_t(Snapshotter::kChunkSize)).field("hash", "xxh64");
  write_provenance(w, v.provenance);
  w.key("kernel").begin_object();
  if (v.kernel) v.kernel(w);
  w.end_object();
  w.key("launch").begin_object();
  if (v.launch) v.launch(w);
  w.end_object();
  if (v.params && v.targets) write_params(w, *v.params, *v.targets, v.handle);
  w.key("regions").begin_array();
  for (size_t i = 0; i < v.regions.size(); ++i) write_region(w, i, v.regions[i]);
  w.end_array();
  w.key("host_regions").begin_array();
  for (size_t h = 0; h < v.hosts.size(); ++h) write_host_region(w, h, v.hosts[h]);
  w.end_array();
  w.key("globals").begin_array();
  for (const ManifestGlobal& g : v.globals) write_global(w, g);
  w.end_array();
  if (v.arrays) v.arrays(w);
  if (v.closure) write_closure(w, *v.closure);
  if (v.extra) v.extra(w);
  w.key("warnings").begin_array();
  for (const std::string& s : v.warnings) w.value(s);
  w.end_array();
  w.key("triton").null();
  w.end_object();
  return w.str();
}

ClosureTargets closure_targets(const std::vector<const TrackedRegion*>& regions,
                               const std::vector<const CapturedGlobal*>& globals,
                               const std::vector<const HostItem*>& hosts, const std::vector<uint64_t>& handles) {
  ClosureTargets t;
  for (size_t i = 0; i < regions.size(); ++i) t.add_region(int(i), regions[i]->base, regions[i]->size);
  for (size_t j = 0; j < globals.size(); ++j) t.add_global(int(j), globals[j]->address, globals[j]->size);
  for (size_t h = 0; h < hosts.size(); ++h)
    if (hosts[h]->device_pointer) t.add_host(int(h), hosts[h]->device_pointer, hosts[h]->region.size);
  for (size_t k = 0; k < handles.size(); ++k) t.add_handle(int(k), handles[k]);
  return t;
}

void check_closure(const ParamCapture& pc, const ClosureTargets& targets, const HostMappings& maps, long launch,
                   ClosureCheck& out) {
  const auto& buf = pc.buffer;
  for (const ParamSlot& p : pc.params) {
    if (p.offset + p.size > buf.size() || p.size < 8) continue;
    for (uint64_t at = (8 - p.offset % 8) % 8; at + 8 <= p.size; at += 8) {
      uint64_t v;
      std::memcpy(&v, buf.data() + p.offset + at, 8);
      ++out.words_checked;
      std::string why = targets.unresolved_reason(v, p.size > 8, maps);
      if (!why.empty()) out.unresolved.push_back(Unresolved{launch, p.index, at, v, std::move(why)});
    }
  }
}

void closure_warnings(const ClosureCheck& c, std::vector<std::string>& warnings) {
  const size_t shown = std::min<size_t>(c.unresolved.size(), 16);
  for (size_t k = 0; k < shown; ++k) {
    const Unresolved& u = c.unresolved[k];
    const std::string launch = u.launch >= 0 ? "launch " + std::to_string(u.launch) + " " : "";
    warnings.push_back(launch + "parameter " + std::to_string(u.param) + (u.at ? " word +" + std::to_string(u.at) : "") +
                       " holds " + hex_addr(u.value) + ", which points into nothing the capture holds: " + u.reason +
                       ". If the kernel dereferences it, the replay faults or reads other memory, and a write "
                       "through it is never compared");
  }
  if (c.unresolved.size() > shown)
    warnings.push_back(std::to_string(c.unresolved.size() - shown) +
                       " more parameter word(s) point into nothing the capture holds (manifest closure.unresolved)");
}

}  // namespace kc
