// One replay session: a capture restored at its original virtual addresses, kept
// resident on the GPU so that replays, timings and validations of the captured cubin
// or of variants cost a module load, a device-to-device restore and the launch.
//
// Call order (the Python server drives it): Session(ordinal) -> reserve -> map ->
// [map_zero] -> [register_host] -> load_state -> load_program (captured cubin, variants: each under a key) ->
// select_program -> time / validate / the primitives below, any number of times.
// Reservations come first so that nothing else in the process takes the captured
// addresses.
//
// Primitives for perturbed and repeated validation (docs/replay.md): restore() puts the
// pre-state back, fill() overwrites spans of it with reproducible pseudo-random values,
// run() launches the selected program once and waits, keep_reference() copies items as
// they are now, compare() checks every item against the captured post-state or those
// references.
#pragma once
#include <cuda.h>

#include <map>
#include <set>
#include <tuple>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "compare.hpp"
#include "fill.hpp"
#include "host_memory.hpp"
#include "kernel.hpp"
#include "resources.hpp"
#include "sequence.hpp"
#include "sparse.hpp"

namespace kc::replay {

struct SpanSpec {
  std::string label;  // "2 (regions 3, 4)"
  unsigned long long base = 0;
  unsigned long long size = 0;
};

// A region (restored at `base`) or a module global (global_name set; its address
// comes from the loaded module). Chunk lists follow docs/capture-format.md.
struct ItemSpec {
  std::string label;  // "region 3", "global scale"
  std::string global_name;
  unsigned long long base = 0;
  unsigned long long size = 0;
  std::vector<std::optional<std::string>> pre, post;
  long array = -1;  // >= 0: the contents of that CUDA array (load_arrays), base unused
  // (offset, length) of the parts backed by memory of their own; ignored (the whole item)
  // unless `sparse`. A sparse region (docs/replay.md) lists its backed parts; the rest is
  // zero-backed.
  std::vector<std::pair<unsigned long long, unsigned long long>> segments;
  bool sparse = false;  // segments are exact (possibly none): the rest of the item is zero-backed
  bool host = false;  // host memory registered with the device (base: its device pointer)
};

struct CompareSpec {
  std::string dtype;  // empty: byte-exact only
  double atol = 0.0, rtol = 0.0;
};

// A span of an item to overwrite with pseudo-random values (perturb_kernels.cu).
struct FillSpec {
  size_t item = 0;                // index into the items given to load_state
  unsigned long long offset = 0;  // bytes from the item's start
  unsigned long long count = 0;   // elements
  std::string dtype;
  unsigned long long seed = 0;
  double mean = 0.0, stddev = 1.0, lo = 0.0, hi = 0.0, p_zero = 0.0;
};

struct CompareOut {
  unsigned long long mismatched_bytes = 0;
  unsigned long long first_byte = kNone;
  unsigned long long mismatched_elements = 0;
  unsigned long long first_element = kNone;
  double max_abs = 0.0, max_rel = 0.0;
  unsigned long long window_offset = 0;  // byte offset of the windows below
  std::string expected, actual;          // a few bytes from the first mismatch on
};

class Session {
 public:
  explicit Session(int ordinal);
  size_t granularity() const { return granularity_; }
  std::pair<int, int> compute_capability() const;
  // (free, total) bytes of device memory (cuMemGetInfo), to refuse a capture that cannot fit.
  std::pair<size_t, size_t> memory() const;
  std::string device_name() const;
  std::string device_uuid() const;  // "GPU-xxxxxxxx-xxxx-...", as nvidia-smi and the manifest write it
  int ordinal() const { return ctx_.ordinal(); }

  void reserve(const std::vector<SpanSpec>& spans);
  void map(const std::vector<std::pair<unsigned long long, unsigned long long>>& ranges);
  // One physical allocation of `size` bytes mapped at every base of each group: regions the
  // app mapped from one allocation (docs/replay.md, "Aliased mappings").
  void map_shared(const std::vector<std::pair<size_t, std::vector<unsigned long long>>>& groups);
  // Backs `ranges` (inside the spans) with one zero chunk of `chunk` bytes mapped many
  // times, read-only where the driver allows it (sparse.hpp).
  void map_zero(const std::vector<std::pair<unsigned long long, unsigned long long>>& ranges, size_t chunk);
  // Registers host ranges the server mapped at their captured addresses and checks that
  // every host region's device pointer is the captured one (host_memory.hpp).
  void register_host(const std::vector<SpanSpec>& ranges, const std::vector<HostSpec>& regions);
  void load_state(const std::string& blob_dir, unsigned long long chunk_size, const std::vector<ItemSpec>& items,
                  int threads);
  // Recreates the capture's CUDA arrays and texture/surface objects (arrays.hpp); after
  // map() (objects over linear memory need it mapped), before load_state().
  void load_arrays(const std::vector<MipmapSpec>& mipmaps, const std::vector<ArraySpec>& arrays,
                   const std::vector<ObjectSpec>& objects);
  // Loads a cubin under `key` with its launch (replacing what the key held; a failing
  // load leaves everything as it was). `global_names`: for each module global of the
  // state (in order), its name in this image (internal-linkage globals carry the
  // variant's module id; "" when the image does not define it); empty = the captured
  // names. Returns the kernel's function attributes.
  std::map<std::string, long long> load_program(const std::string& key, LaunchSpec spec, const std::string& image,
                                                const std::string& label,
                                                const std::vector<std::string>& global_names = {});
  // A captured sequence (or a variant of it) as one program under `key` (sequence.hpp):
  // restore, run, compare, time and the primitives below treat it as one kernel. Returns
  // its first launch's function attributes.
  std::map<std::string, long long> load_sequence(const std::string& key, SeqSpec spec, const std::string& label);
  // The selected sequence's steps [begin, end) on the replay stream, waited for.
  void run_steps(size_t begin, size_t end);
  size_t sequence_steps() const;
  // Per iteration: the whole sequence's time, then each launch's (events around it on its
  // stream), after `warmup` untimed runs; before each run only what it wrote is restored.
  std::vector<std::vector<double>> time_steps(int iterations, int warmup);
  // Copies the expected state of compare(…, against) over what the program left at these
  // (item, offset, length) spans, so a compare after it ignores them: the buffers a fused
  // variant legitimately leaves unwritten (docs/sequences.md, "Fusions").
  void mask(const std::vector<std::tuple<size_t, unsigned long long, unsigned long long>>& spans,
            const std::string& against);
  void select_program(const std::string& key);
  void drop_program(const std::string& key);

  // Warm-up, then one CUDA-event time per iteration (ms). Before each launch only
  // what the baseline wrote is restored (and the selected program's own globals reset);
  // the optional L2 flush (cold) or L2 warming (the kernel's memory read, up to the L2's
  // size: as an app that just produced it leaves it) is outside the timing. Launch it (warm-up included) runs on
  // timing input it % K (set_time_inputs), and with the check on (the default) every
  // timed launch is followed, outside the timed interval, by a GPU compare of what it
  // wrote with the expected state of its input: last_check() has the result.
  // kernel_timer: each timed launch's time is its kernels' span in CUPTI's records
  // (kernel_timer.hpp), the events' times kept in last_events_ms().
  std::vector<double> time(int iterations, int warmup, bool flush_l2, bool warm_l2 = false,
                           bool kernel_timer = false);
  // The events' times of the last kernel-timed time() (empty after an events-timed one).
  std::vector<double> last_events_ms() const { return last_events_ms_; }
  // The inputs time() rotates over: one list of fills per input; an empty list is the
  // captured input (expected: the captured post-state), input j with fills is expected
  // to leave reference slot j (keep_reference(items, j) after running the captured
  // program on it). Default: the captured input alone.
  void set_time_inputs(const std::vector<std::vector<FillSpec>>& inputs);
  // The bytes of mapped pages that no captured item covers (the padding of a region's
  // last page): zeroed now and before every launch, so nothing a program leaves there
  // reaches the next launch; gap_bytes() counts those that are not zero now.
  void set_gaps(const std::vector<std::pair<unsigned long long, unsigned long long>>& gaps);
  unsigned long long gap_bytes();
  // Whether time() checks its launches, and how (one spec per item; empty: byte-exact;
  // dtype "none": that item is not checked).
  void set_check(bool on, const std::vector<CompareSpec>& specs);
  // Per timed launch of the last time(): (its input, differing bytes or elements);
  // empty when the check was off.
  std::vector<std::pair<int, unsigned long long>> last_check() const { return last_check_; }
  // Restores the whole pre-state, launches once, compares every item on the GPU with
  // its expected post-state (pre-state for items the baseline did not write).
  std::vector<CompareOut> validate(const std::vector<CompareSpec>& specs);

  // -- primitives (all on the replay stream, for the selected program) ---------------
  void restore();
  void fill(const std::vector<FillSpec>& fills);
  // Launches the selected program once and waits for it; errors name its label.
  void run();
  // Copies the current contents of the given items into their reference buffers of
  // `slot` (0: "reference"; the timing inputs use 1..K-1; others are free).
  void keep_reference(const std::vector<size_t>& items, int slot = 0);
  // Forgets every reference of every slot (the buffers are kept for reuse).
  void clear_references();
  // Compares every item with `against`: "captured" (post-state where the baseline wrote,
  // else pre-state), "reference" or "reference:N" (the item's reference in slot 0 or N,
  // else its pre-state).
  std::vector<CompareOut> compare(const std::vector<CompareSpec>& specs, const std::string& against);
  // `length` bytes of an item's replay memory from `offset` (tests, reports).
  std::string read(size_t item, unsigned long long offset, unsigned long long length);
  // Where one item's states live for the selected program (mismatch.cpp): what it left
  // there (as compare sees it), the expected state of compare(specs, against) and the
  // resident pre-state. Call after the work on stream() is done.
  struct ItemPointers {
    CUdeviceptr actual = 0, expected = 0, pre = 0;
    size_t size = 0;
    std::string label;
  };
  ItemPointers item_pointers(size_t index, const std::string& against) const;
  CUstream stream() const;
  // CUDA-event times (ms) of an empty kernel: the floor under any kernel's timing.
  std::vector<double> time_empty(int iterations);
  std::string pci_bus_id() const;

  std::vector<std::string> notes() const;
  // Empty when the context is usable; else the sticky error cuCtxSynchronize reports.
  std::string health();

 private:
  // A part of an item with resident copies of its own: the whole item, or one backed
  // part of a sparse region (its zero-backed rest needs no copy: it cannot change).
  struct Segment {
    size_t offset = 0, length = 0;                        // from the item's start
    DeviceBuffer pre, post;                               // resident copies (post: only if written)
    std::map<int, DeviceBuffer> refs;                     // keep_reference() per slot, allocated on first use
  };
  struct Written {
    size_t segment, offset, length;                       // offset from the item's start (chunk-granular)
  };
  struct Item {
    ItemSpec spec;
    CUdeviceptr target = 0;
    size_t global_index = 0;
    std::vector<Segment> segments;
    std::set<int> refs;  // slots holding a reference now
    std::vector<Written> written;
  };
  // A part of an item a checked timing compares: (item, segment, offset from the item's
  // start, length); its expected bytes are at the same offset of the segment's copy.
  struct Range {
    size_t item, segment, offset, length;
  };
  struct TimeInput {
    std::vector<FillSpec> fills;  // empty: the captured input
    std::vector<Range> check;     // what a launch on it is checked on
  };
  // The slot of a compare's `against` ("captured": -1) or Error("input").
  static int slot_of(const std::string& against);
  // The expected bytes of segment g of `item` for slot (-1: captured post/pre).
  CUdeviceptr expected_at(const Item& item, const Segment& g, int slot) const;
  void enqueue_check(const TimeInput& in, int slot, CUdeviceptr out);
  // load_state, per item: its target and segments checked against the manifest and the
  // loaded arrays (nothing allocated) ...
  Item plan_item(const ItemSpec& spec, size_t chunks) const;
  static size_t segment_of(const Item& item, size_t off, size_t len);
  // ... the chunk runs the baseline wrote (item.written) and which segments hold any ...
  static std::vector<bool> mark_written(Item& item, unsigned long long chunk_size, size_t chunks);
  // ... then zeroed resident copies: pre-state, and post-state where seg_written.
  static void allocate_segments(Item& item, const std::vector<bool>& seg_written);
  // compare: segment g's bytes as the selected program left them (see actual_of) ...
  CUdeviceptr actual_at(const Item& item, const Segment& g) const;
  // ... each segment's byte (and, with a dtype, element) compare into its two result
  // slots from first_slot[item], then the zero chunk's into zero_slot (and + 1) ...
  void enqueue_compares(CUstream s, const std::vector<CompareSpec>& specs, int slot,
                        const std::vector<size_t>& first_slot);
  void enqueue_zero_check(CUstream s, size_t zero_slot);
  // ... and one item's CompareOut from its host results (from `base`), with windows of
  // actual and expected bytes at the first mismatch.
  void summarize(CompareOut& o, const Item& item, const CompareSpec& spec, const std::vector<CmpResult>& host,
                 size_t base, unsigned long long dirty_zero, int slot) const;
  struct Program {
    std::unique_ptr<LaunchConfig> launch;
    std::unique_ptr<LoadedKernel> kernel;
    std::unique_ptr<SequenceProgram> seq;  // a sequence program instead of one kernel
    std::string label;
  };
  std::string program_what() const;  // "kernel K of L" / "the sequence of L", for errors
  void require_kernel(const char* what) const;
  // Where an item lives for the selected program: a region's captured address, a
  // module global's address in the program's module (0 when it does not define it).
  CUdeviceptr target_of(const Item& item) const;
  // What the program leaves in an item: target_of, or the pre-state for a global it
  // does not define (compare, keep_reference, read).
  CUdeviceptr actual_of(const Item& item) const;
  const Item& item_at(size_t index, const char* what) const;
  void restore_all();
  void restore_written();
  // A device-to-device copy of the replay stream; host items go through cuMemcpyAsync,
  // which tells mapped host memory from device memory by the pointer.
  void copy(const Item& item, CUdeviceptr dst, CUdeviceptr src, size_t n, const std::string& what);
  void launch();

  PrimaryContext ctx_;
  size_t granularity_ = 0;
  std::vector<Reservation> reservations_;
  std::vector<Mapping> mappings_;
  std::unique_ptr<ZeroBacking> zero_;
  std::vector<HostRegistration> host_;
  std::vector<std::string> state_notes_;  // sparse regions, host memory
  std::vector<Item> items_;
  std::unique_ptr<Stream> stream_;
  std::map<std::string, Program> programs_;
  Program* current_ = nullptr;  // a node of programs_ (stable under insertion)
  std::string current_key_;
  std::unique_ptr<Arrays> arrays_;
  std::unique_ptr<Comparer> comparer_;
  std::unique_ptr<Filler> filler_;
  DeviceBuffer results_;
  DeviceBuffer l2_scratch_;
  DeviceBuffer zero_expected_;  // zeros, for checking a read-write zero backing
  void zero_gaps();
  void read_into_l2(size_t budget);  // the items' device memory read in their order until the L2's size is read
  std::vector<std::pair<unsigned long long, unsigned long long>> gaps_;
  DeviceBuffer gap_zero_;  // zeros as long as the longest gap, for gap_bytes()
  std::vector<TimeInput> time_inputs_;             // empty: the captured input alone
  std::vector<std::tuple<size_t, size_t, size_t>> input_spans_;  // (item, offset, bytes) any input fills
  bool check_ = true;
  std::vector<CompareSpec> check_specs_;
  std::vector<std::pair<int, unsigned long long>> last_check_;
  std::vector<double> last_events_ms_;
  DeviceBuffer check_results_;
};

}  // namespace kc::replay
