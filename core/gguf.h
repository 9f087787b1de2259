// GGUF v2/v3 reader (mmap) and writer. Every field is validated against the file before use.
#pragma once

#include <array>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace tandem {

// Metadata value types as stored.
enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
std::string_view GgufTypeName(GgufType t);

struct GgufValue;
struct GgufArray {
  GgufType elem_type = GgufType::kUint8;
  std::vector<GgufValue> items;  // nested arrays allowed
};

struct GgufValue {
  GgufType type = GgufType::kUint8;
  // Integers are widened (bool is 0/1), floats are widened to double, strings and arrays as is.
  std::variant<uint64_t, int64_t, double, std::string, std::shared_ptr<GgufArray>> v;

  // Typed accessors: nullopt when the stored type does not convert without loss.
  std::optional<int64_t> AsInt() const;      // any integer type or bool, in range
  std::optional<uint64_t> AsUint() const;    // any non-negative integer
  std::optional<double> AsFloat() const;     // float32/float64 (integers too)
  const std::string* AsString() const;
  const GgufArray* AsArray() const;
};

struct GgufKV {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  DType type = DType::kF32;
  int n_dims = 0;                           // 1..4
  std::array<int64_t, 4> ne = {1, 1, 1, 1};  // ggml order: ne[0] innermost (contiguous)
  uint64_t offset = 0;                      // relative to the data section
  uint64_t nbytes = 0;                      // bytes of data
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class GgufFile {
 public:
  // Opens and validates a file through mmap. Errors name the field, tensor or key and the byte offset.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (the bytes are copied). Used by the fuzzer and tests.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::span<const uint8_t> bytes);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  uint64_t file_size() const { return size_; }
  const std::string& path() const { return path_; }

  const std::vector<GgufKV>& metadata() const { return kvs_; }
  const GgufValue* Find(std::string_view key) const;  // nullptr if absent
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;  // nullptr if absent

  // Pointer to a tensor's bytes inside the mapping (valid for the file's lifetime).
  const uint8_t* TensorData(const GgufTensorInfo& t) const { return base_ + data_offset_ + t.offset; }
  const uint8_t* base() const { return base_; }
  // Tells the kernel this process no longer needs the mapped pages inside [p, p + n) (a copy now serves the
  // reads): they leave the resident set and are read back from the file if touched again. No-op when not mapped.
  void ReleasePages(const void* p, size_t n) const;

 private:
  GgufFile() = default;
  absl::Status Parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;              // munmap on destruction
  std::vector<uint8_t> owned_;       // FromBytes storage
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKV> kvs_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// ---- Writer ----
struct GgufWriteTensor {
  std::string name;
  DType type = DType::kF32;
  int n_dims = 1;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};
  std::span<const uint8_t> data;  // exactly the tensor's bytes
  // Alternative to `data` for tensors too large to hold all at once: called just before the tensor is written,
  // with a buffer of exactly the tensor's byte size to fill (WriteGguf only).
  std::function<absl::Status(uint8_t* dst, size_t bytes)> produce;
  // Neither data nor producer: the tensor is all zero bytes, left as a hole in the file (WriteGguf) so a
  // real-shaped model for planning costs no disk and no time.
  bool zeros = false;
};

struct GgufWriteOptions {
  uint32_t version = 3;
  uint64_t alignment = 32;  // also written as general.alignment when it differs from 32
};

// Writes metadata (in the given order) and tensors (in the given order, each aligned).
absl::Status WriteGguf(const std::string& path, const std::vector<GgufKV>& metadata,
                       const std::vector<GgufWriteTensor>& tensors, const GgufWriteOptions& opts = {});
// Same, into memory.
absl::StatusOr<std::vector<uint8_t>> SerializeGguf(const std::vector<GgufKV>& metadata,
                                                   const std::vector<GgufWriteTensor>& tensors,
                                                   const GgufWriteOptions& opts = {});

// Value builders for writers.
GgufValue GgufU32(uint32_t v);
GgufValue GgufI32(int32_t v);
GgufValue GgufF32(float v);
GgufValue GgufBool(bool v);
GgufValue GgufStr(std::string v);
GgufValue GgufArr(GgufType elem_type, std::vector<GgufValue> items);

}  // namespace tandem
