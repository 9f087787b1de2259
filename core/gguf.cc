// GGUF v2/v3 reader and writer. The reader trusts nothing: every count, length, type id, shape and offset is
// checked against the bytes that are actually there before it is used, and every error names the field and the
// byte offset where it was found.
#include "core/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/status.h"

namespace tandem {
namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxKeyBytes = 65535;  // the GGUF spec's limit on key length
constexpr uint64_t kMaxNameBytes = 1024;  // ggml allows 63; anything near this is garbage
constexpr int kMaxArrayDepth = 8;         // nested arrays; bounded so hostile files cannot blow the stack
constexpr char kAlignmentKey[] = "general.alignment";

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

// Fixed bytes of a scalar value, 0 for string/array (variable).
uint64_t ScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

// The fewest bytes one stored item of type t can take: the bound that makes a count trustworthy.
uint64_t MinItemSize(GgufType t) {
  if (t == GgufType::kString) return 8;  // u64 length
  if (t == GgufType::kArray) return 12;  // u32 elem type + u64 count
  return ScalarSize(t);
}

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }
bool AddOverflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

// Little-endian cursor over the file image. Reads past the end are errors naming `what` and the offset.
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  // `what` comes in pieces that are joined only on error: the success path of a 32000-string vocab builds no
  // messages.
  absl::Status Need(uint64_t n, std::string_view what, std::string_view what2 = {}, std::string_view what3 = {}) const {
    if (n > remaining()) {
      return DataLoss(what, what2, what3, " at byte ", pos_, ": needs ", n, " bytes but the file ends at byte ", size_,
                      " (truncated)");
    }
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Read(T* out, std::string_view what, std::string_view what2 = {}) {
    TANDEM_RETURN_IF_ERROR(Need(sizeof(T), what, what2));
    std::memcpy(out, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  // A gguf string: u64 length + bytes. max_len bounds lengths that have a natural limit (keys, names).
  absl::Status ReadString(std::string* out, uint64_t max_len, std::string_view what, std::string_view what2 = {}) {
    const uint64_t at = pos_;
    uint64_t len;
    TANDEM_RETURN_IF_ERROR(Need(sizeof len, what, what2, " length"));
    std::memcpy(&len, base_ + pos_, sizeof len);
    pos_ += sizeof len;
    if (len > max_len) {
      return InvalidArgument(what, what2, " at byte ", at, ": length ", len, " exceeds the limit of ", max_len);
    }
    if (len > remaining()) {
      return DataLoss(what, what2, " at byte ", at, ": length ", len, " runs past the end of the file (", remaining(),
                      " bytes left)");
    }
    out->assign(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

std::string Quoted(std::string_view s) {
  // Keys and names come from the file: keep error lines printable and short.
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += Cat("\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 80) out += "...";
  return out + "'";
}

absl::Status ReadValue(Cursor& cur, GgufType type, int depth, const std::string& where, GgufValue* out);

absl::Status ReadArray(Cursor& cur, int depth, const std::string& where, GgufValue* out) {
  const uint64_t at = cur.pos();
  if (depth >= kMaxArrayDepth) {
    return InvalidArgument(where, ": arrays nested deeper than ", kMaxArrayDepth, " at byte ", at);
  }
  uint32_t elem_raw;
  TANDEM_RETURN_IF_ERROR(cur.Read(&elem_raw, where, ": array element type"));
  if (!IsKnownValueType(elem_raw)) {
    return InvalidArgument(where, ": unknown array element type ", elem_raw, " at byte ", at);
  }
  const GgufType elem = static_cast<GgufType>(elem_raw);
  const uint64_t count_at = cur.pos();
  uint64_t count;
  TANDEM_RETURN_IF_ERROR(cur.Read(&count, where, ": array count"));
  const uint64_t min_item = MinItemSize(elem);
  if (count > cur.remaining() / min_item) {
    return DataLoss(where, ": array count ", count, " at byte ", count_at, " needs at least ", min_item,
                    " bytes per item but only ", cur.remaining(), " bytes remain");
  }
  auto arr = std::make_shared<GgufArray>();
  arr->elem_type = elem;
  arr->items.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    TANDEM_RETURN_IF_ERROR(ReadValue(cur, elem, depth + 1, where, &arr->items[i]));
  }
  out->type = GgufType::kArray;
  out->v = std::move(arr);
  return absl::OkStatus();
}

absl::Status ReadValue(Cursor& cur, GgufType type, int depth, const std::string& where, GgufValue* out) {
  out->type = type;
  const uint64_t at = cur.pos();
  switch (type) {
    case GgufType::kUint8: {
      uint8_t x;
      TANDEM_RETURN_IF_ERROR(cur.Read(&x, where));
      out->v = uint64_t{x};
      break;
    }
    case GgufType::kUint16: {
      uint16_t x;
      TANDEM_RETURN_IF_ERROR(cur.Read(&x, where));
      out->v = uint64_t{x};
      break;
    }
    case GgufType::kUint32: {
      uint32_t x;
      TANDEM_RETURN_IF_ERROR(cur.Read(&x, where));
      out->v = uint64_t{x};
      break;
    }
    case GgufType::kUint64: {
      uint64_t x;
      TANDEM_RETURN_IF_ERROR(cur.Read(&x, where));
      out->v = x;
      break;
    }
    case GgufType::kInt8: {
      int8_t x;
      TANDEM_RETURN_IF_ERROR(cur.Read(&x, where));
      out->v = int64_t{x};
      break;
    }
    case GgufType::kInt16: {
      int16_t x;
      TANDEM_RETURN_IF_ERROR(cur.Read(&x, where));
      out->v = int64_t{x};
      break;
    }
    case GgufType::kInt32: {
      int32_t x;
      TANDEM_RETURN_IF_ERROR(cur.Read(&x, where));
      out->v = int64_t{x};
      break;
    }
    case GgufType::kInt64: {
      int64_t x;
      TANDEM_RETURN_IF_ERROR(cur.Read(&x, where));
      out->v = x;
      break;
    }
    case GgufType::kFloat32: {
      float x;
      TANDEM_RETURN_IF_ERROR(cur.Read(&x, where));
      out->v = double{x};
      break;
    }
    case GgufType::kFloat64: {
      double x;
      TANDEM_RETURN_IF_ERROR(cur.Read(&x, where));
      out->v = x;
      break;
    }
    case GgufType::kBool: {
      uint8_t x;
      TANDEM_RETURN_IF_ERROR(cur.Read(&x, where));
      if (x > 1) return InvalidArgument(where, ": bool value ", int{x}, " at byte ", at, " is neither 0 nor 1");
      out->v = uint64_t{x};
      break;
    }
    case GgufType::kString: {
      std::string s;
      TANDEM_RETURN_IF_ERROR(cur.ReadString(&s, std::numeric_limits<uint64_t>::max(), where, ": string"));
      out->v = std::move(s);
      break;
    }
    case GgufType::kArray:
      return ReadArray(cur, depth, where, out);
  }
  return absl::OkStatus();
}

using NameIndex = std::map<std::string, size_t, std::less<>>;

absl::Status ReadMetadata(Cursor& cur, uint64_t kv_count, std::vector<GgufKV>* kvs, NameIndex* index) {
  for (uint64_t i = 0; i < kv_count; ++i) {
    const uint64_t key_at = cur.pos();
    GgufKV kv;
    TANDEM_RETURN_IF_ERROR(cur.ReadString(&kv.key, kMaxKeyBytes, Cat("metadata entry ", i, ": key")));
    if (kv.key.empty()) return InvalidArgument("metadata entry ", i, ": empty key at byte ", key_at);
    const std::string where = Cat("key ", Quoted(kv.key));
    if (index->count(kv.key)) return InvalidArgument(where, ": duplicate key at byte ", key_at);
    const uint64_t type_at = cur.pos();
    uint32_t type_raw;
    TANDEM_RETURN_IF_ERROR(cur.Read(&type_raw, where, ": value type"));
    if (!IsKnownValueType(type_raw)) {
      return InvalidArgument(where, ": unknown value type ", type_raw, " at byte ", type_at);
    }
    TANDEM_RETURN_IF_ERROR(ReadValue(cur, static_cast<GgufType>(type_raw), 0, where, &kv.value));
    index->emplace(kv.key, kvs->size());
    kvs->push_back(std::move(kv));
  }
  return absl::OkStatus();
}

absl::Status ReadTensorInfos(Cursor& cur, uint64_t tensor_count, uint64_t alignment,
                             std::vector<GgufTensorInfo>* tensors, NameIndex* index) {
  for (uint64_t i = 0; i < tensor_count; ++i) {
    const uint64_t info_at = cur.pos();
    GgufTensorInfo t;
    TANDEM_RETURN_IF_ERROR(cur.ReadString(&t.name, kMaxNameBytes, Cat("tensor info ", i, ": name")));
    if (t.name.empty()) return InvalidArgument("tensor info ", i, ": empty name at byte ", info_at);
    const std::string where = Cat("tensor ", Quoted(t.name));
    if (index->count(t.name)) return InvalidArgument(where, ": duplicate tensor name at byte ", info_at);

    const uint64_t dims_at = cur.pos();
    uint32_t n_dims;
    TANDEM_RETURN_IF_ERROR(cur.Read(&n_dims, where, ": n_dims"));
    if (n_dims < 1 || n_dims > 4) {
      return InvalidArgument(where, ": n_dims ", n_dims, " at byte ", dims_at, " is outside 1..4");
    }
    t.n_dims = static_cast<int>(n_dims);
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne_at = cur.pos();
      uint64_t ne;
      TANDEM_RETURN_IF_ERROR(cur.Read(&ne, Cat(where, ": ne[", d, "]")));
      if (ne == 0) return InvalidArgument(where, ": ne[", d, "] is 0 at byte ", ne_at);
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          MulOverflows(n_elements, ne, &n_elements) ||
          n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return InvalidArgument(where, ": element count overflows at ne[", d, "] = ", ne, " (byte ", ne_at, ")");
      }
      t.ne[d] = static_cast<int64_t>(ne);
    }
    const uint64_t type_at = cur.pos();
    uint32_t type_raw;
    TANDEM_RETURN_IF_ERROR(cur.Read(&type_raw, where, ": type"));
    const std::optional<DTypeTraits> tr = TraitsOf(type_raw);
    if (!tr) return InvalidArgument(where, ": unknown or unsupported type id ", type_raw, " at byte ", type_at);
    t.type = tr->type;
    if (t.ne[0] % tr->block_elems != 0) {
      return InvalidArgument(where, ": row length ne[0] = ", t.ne[0], " is not a multiple of ", tr->name,
                             "'s block size ", tr->block_elems, " (byte ", dims_at + 4, ")");
    }
    // n_elements / block_elems blocks, exact because ne[0] is a multiple of the block.
    if (MulOverflows(n_elements / static_cast<uint64_t>(tr->block_elems), tr->block_bytes, &t.nbytes)) {
      return InvalidArgument(where, ": byte size overflows (", n_elements, " elements of ", tr->name, ")");
    }
    const uint64_t off_at = cur.pos();
    TANDEM_RETURN_IF_ERROR(cur.Read(&t.offset, where, ": offset"));
    if (t.offset % alignment != 0) {
      return InvalidArgument(where, ": data offset ", t.offset, " at byte ", off_at,
                             " is not a multiple of the alignment ", alignment);
    }
    index->emplace(t.name, tensors->size());
    tensors->push_back(std::move(t));
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Values

std::string_view GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "UINT8";
    case GgufType::kInt8:
      return "INT8";
    case GgufType::kUint16:
      return "UINT16";
    case GgufType::kInt16:
      return "INT16";
    case GgufType::kUint32:
      return "UINT32";
    case GgufType::kInt32:
      return "INT32";
    case GgufType::kFloat32:
      return "FLOAT32";
    case GgufType::kBool:
      return "BOOL";
    case GgufType::kString:
      return "STRING";
    case GgufType::kArray:
      return "ARRAY";
    case GgufType::kUint64:
      return "UINT64";
    case GgufType::kInt64:
      return "INT64";
    case GgufType::kFloat64:
      return "FLOAT64";
  }
  return "UNKNOWN";
}

std::optional<int64_t> GgufValue::AsInt() const {
  if (const uint64_t* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (const int64_t* i = std::get_if<int64_t>(&v)) return *i;
  return std::nullopt;
}

std::optional<uint64_t> GgufValue::AsUint() const {
  if (const uint64_t* u = std::get_if<uint64_t>(&v)) return *u;
  if (const int64_t* i = std::get_if<int64_t>(&v)) {
    if (*i < 0) return std::nullopt;
    return static_cast<uint64_t>(*i);
  }
  return std::nullopt;
}

std::optional<double> GgufValue::AsFloat() const {
  if (const double* d = std::get_if<double>(&v)) return *d;
  if (const uint64_t* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return std::nullopt;
}

const std::string* GgufValue::AsString() const { return std::get_if<std::string>(&v); }

const GgufArray* GgufValue::AsArray() const {
  const std::shared_ptr<GgufArray>* a = std::get_if<std::shared_ptr<GgufArray>>(&v);
  return a ? a->get() : nullptr;
}

GgufValue GgufU32(uint32_t v) { return GgufValue{GgufType::kUint32, uint64_t{v}}; }
GgufValue GgufI32(int32_t v) { return GgufValue{GgufType::kInt32, int64_t{v}}; }
GgufValue GgufF32(float v) { return GgufValue{GgufType::kFloat32, double{v}}; }
GgufValue GgufBool(bool v) { return GgufValue{GgufType::kBool, uint64_t{v ? 1u : 0u}}; }
GgufValue GgufStr(std::string v) { return GgufValue{GgufType::kString, std::move(v)}; }
GgufValue GgufArr(GgufType elem_type, std::vector<GgufValue> items) {
  auto arr = std::make_shared<GgufArray>();
  arr->elem_type = elem_type;
  arr->items = std::move(items);
  return GgufValue{GgufType::kArray, std::move(arr)};
}

// ---------------------------------------------------------------------------------------------------------------
// Reader

GgufFile::~GgufFile() {
  if (mapped_ && base_ != nullptr) munmap(const_cast<uint8_t*>(base_), size_);
}

void GgufFile::ReleasePages(const void* p, size_t n) const {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const auto lo = reinterpret_cast<uintptr_t>(base_);
  if (!mapped_ || begin < lo || begin + n > lo + size_ || n == 0) return;
  // Only whole pages inside the range: the neighbours' bytes on the edge pages stay.
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + n) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(Cat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::NotFoundError(Cat(path, ": cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path, ": not a regular file");
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ == 0) {
    ::close(fd);
    return DataLoss(path, ": empty file (0 bytes), not a GGUF file");
  }
  void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (p == MAP_FAILED) return absl::InternalError(Cat(path, ": mmap failed: ", std::strerror(err)));
  f->base_ = static_cast<const uint8_t*>(p);
  f->mapped_ = true;
  absl::Status s = f->Parse();
  if (!s.ok()) return absl::Status(s.code(), Cat(path, ": ", s.message()));
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::span<const uint8_t> bytes) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->owned_.assign(bytes.begin(), bytes.end());
  f->base_ = f->owned_.data();
  f->size_ = f->owned_.size();
  TANDEM_RETURN_IF_ERROR(f->Parse());
  return f;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status GgufFile::Parse() {
  Cursor cur(base_, size_);

  // ---- header ----
  char magic[4];
  TANDEM_RETURN_IF_ERROR(cur.Read(&magic, "header: magic"));
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return InvalidArgument("header: bad magic at byte 0 (not a GGUF file)");
  }
  TANDEM_RETURN_IF_ERROR(cur.Read(&version_, "header: version"));
  if (version_ == 1) return Unimplemented("header: GGUF version 1 at byte 4 is not supported (only 2 and 3)");
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xffffu) == 0 && __builtin_bswap32(version_) >= 1 && __builtin_bswap32(version_) <= 3) {
      return Unimplemented("header: big-endian GGUF (version ", __builtin_bswap32(version_),
                           " byte-swapped) at byte 4 is not supported");
    }
    return InvalidArgument("header: unknown GGUF version ", version_, " at byte 4 (only 2 and 3)");
  }
  uint64_t tensor_count, kv_count;
  TANDEM_RETURN_IF_ERROR(cur.Read(&tensor_count, "header: tensor_count"));
  TANDEM_RETURN_IF_ERROR(cur.Read(&kv_count, "header: kv_count"));

  // ---- metadata ----
  // Storage is sized only by what the remaining bytes could hold. A larger count always fails inside the loop
  // (every entry takes at least 14 bytes); the error then says where the bytes ran out and that the count
  // could not fit.
  const uint64_t kv_room = cur.remaining() / 14;  // key length (8) + 1 key byte + type (4) + 1 value byte
  kvs_.reserve(std::min(kv_count, kv_room));
  if (absl::Status s = ReadMetadata(cur, kv_count, &kvs_, &kv_index_); !s.ok()) {
    if (kv_count <= kv_room) return s;
    return absl::Status(s.code(), Cat(s.message(), "; header: kv_count ", kv_count,
                                      " at byte 16 cannot fit in the bytes after the header"));
  }

  // ---- alignment ----
  alignment_ = kDefaultAlignment;
  if (const GgufValue* a = Find(kAlignmentKey)) {
    if (a->type != GgufType::kUint32) {
      return InvalidArgument("key '", kAlignmentKey, "': type ", GgufTypeName(a->type), ", expected UINT32");
    }
    const uint64_t al = *a->AsUint();
    if (al == 0 || !std::has_single_bit(al)) {
      return InvalidArgument("key '", kAlignmentKey, "': ", al, " is not a power of two");
    }
    alignment_ = al;
  }

  // ---- tensor infos ----
  // Smallest tensor info: name length (8) + 1 byte + n_dims (4) + one ne (8) + type (4) + offset (8).
  const uint64_t info_room = cur.remaining() / 33;
  tensors_.reserve(std::min(tensor_count, info_room));
  if (absl::Status s = ReadTensorInfos(cur, tensor_count, alignment_, &tensors_, &tensor_index_); !s.ok()) {
    if (tensor_count <= info_room) return s;
    return absl::Status(s.code(), Cat(s.message(), "; header: tensor_count ", tensor_count,
                                      " at byte 8 cannot fit in the bytes after the metadata"));
  }

  // ---- padding, then the data section ----
  const uint64_t infos_end = cur.pos();
  uint64_t padded;
  if (AddOverflows(infos_end, alignment_ - 1, &padded)) return InvalidArgument("padding: alignment overflows");
  padded -= padded % alignment_;
  if (padded > size_) {
    // A file without tensors needs no data section, and writers may omit its padding.
    if (!tensors_.empty()) {
      return DataLoss("padding: the data section should start at byte ", padded, " but the file ends at byte ", size_,
                      " (truncated)");
    }
    padded = size_;
  }
  data_offset_ = padded;
  const uint64_t data_size = size_ - data_offset_;

  for (const GgufTensorInfo& t : tensors_) {
    uint64_t end, file_end;
    if (AddOverflows(t.offset, t.nbytes, &end) || AddOverflows(data_offset_, end, &file_end)) {
      return DataLoss("tensor ", Quoted(t.name), ": data [offset ", t.offset, ", ", t.nbytes,
                      " bytes] wraps around the 64-bit offset range (file is ", size_, " bytes)");
    }
    if (end > data_size) {
      return DataLoss("tensor ", Quoted(t.name), ": data [offset ", t.offset, ", ", t.nbytes, " bytes] at file byte ",
                      data_offset_ + t.offset, " runs past end of file (", size_, " bytes)");
    }
  }
  // Overlaps: sort by start; each tensor must begin at or after the end of the one before.
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const GgufTensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& cur_t = *by_offset[i];
    if (cur_t.offset < prev.offset + prev.nbytes) {
      return InvalidArgument("tensor ", Quoted(cur_t.name), ": data [offset ", cur_t.offset, ", ", cur_t.nbytes,
                             " bytes] overlaps tensor ", Quoted(prev.name), " [offset ", prev.offset, ", ", prev.nbytes,
                             " bytes]");
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------------------------
// Writer

namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Put(T x) {
    const size_t n = out_->size();
    out_->resize(n + sizeof(T));
    std::memcpy(out_->data() + n, &x, sizeof(T));
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }

 private:
  std::vector<uint8_t>* out_;
};

template <typename T>
absl::Status PutInt(ByteSink& sink, const GgufValue& v, const std::string& where) {
  if constexpr (std::is_signed_v<T>) {
    const std::optional<int64_t> x = v.AsInt();
    if (!x || *x < std::numeric_limits<T>::min() || *x > std::numeric_limits<T>::max()) {
      return InvalidArgument(where, ": value does not fit ", GgufTypeName(v.type));
    }
    sink.Put<T>(static_cast<T>(*x));
  } else {
    const std::optional<uint64_t> x = v.AsUint();
    if (!x || *x > std::numeric_limits<T>::max()) {
      return InvalidArgument(where, ": value does not fit ", GgufTypeName(v.type));
    }
    sink.Put<T>(static_cast<T>(*x));
  }
  return absl::OkStatus();
}

absl::Status PutValue(ByteSink& sink, const GgufValue& v, int depth, const std::string& where) {
  switch (v.type) {
    case GgufType::kUint8:
      return PutInt<uint8_t>(sink, v, where);
    case GgufType::kUint16:
      return PutInt<uint16_t>(sink, v, where);
    case GgufType::kUint32:
      return PutInt<uint32_t>(sink, v, where);
    case GgufType::kUint64:
      return PutInt<uint64_t>(sink, v, where);
    case GgufType::kInt8:
      return PutInt<int8_t>(sink, v, where);
    case GgufType::kInt16:
      return PutInt<int16_t>(sink, v, where);
    case GgufType::kInt32:
      return PutInt<int32_t>(sink, v, where);
    case GgufType::kInt64:
      return PutInt<int64_t>(sink, v, where);
    case GgufType::kBool: {
      const std::optional<uint64_t> x = v.AsUint();
      if (!x || *x > 1) return InvalidArgument(where, ": bool value is not 0 or 1");
      sink.Put<uint8_t>(static_cast<uint8_t>(*x));
      return absl::OkStatus();
    }
    case GgufType::kFloat32:
    case GgufType::kFloat64: {
      const double* d = std::get_if<double>(&v.v);
      if (!d) return InvalidArgument(where, ": ", GgufTypeName(v.type), " value holds no float");
      if (v.type == GgufType::kFloat32) {
        sink.Put<float>(static_cast<float>(*d));
      } else {
        sink.Put<double>(*d);
      }
      return absl::OkStatus();
    }
    case GgufType::kString: {
      const std::string* s = v.AsString();
      if (!s) return InvalidArgument(where, ": STRING value holds no string");
      sink.PutString(*s);
      return absl::OkStatus();
    }
    case GgufType::kArray: {
      const GgufArray* a = v.AsArray();
      if (!a) return InvalidArgument(where, ": ARRAY value holds no array");
      if (depth >= kMaxArrayDepth) return InvalidArgument(where, ": arrays nested deeper than ", kMaxArrayDepth);
      if (!IsKnownValueType(static_cast<uint32_t>(a->elem_type))) {
        return InvalidArgument(where, ": unknown array element type");
      }
      sink.Put<uint32_t>(static_cast<uint32_t>(a->elem_type));
      sink.Put<uint64_t>(a->items.size());
      for (const GgufValue& item : a->items) {
        if (item.type != a->elem_type) {
          return InvalidArgument(where, ": array item of type ", GgufTypeName(item.type), " in an array of ",
                                 GgufTypeName(a->elem_type));
        }
        TANDEM_RETURN_IF_ERROR(PutValue(sink, item, depth + 1, where));
      }
      return absl::OkStatus();
    }
  }
  return InvalidArgument(where, ": unknown value type ", static_cast<uint32_t>(v.type));
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Bytes of a tensor's data from its shape; only called after BuildHead validated the shape and type.
size_t TensorBytes(const GgufWriteTensor& t) {
  const DTypeTraits& tr = Traits(t.type);
  return static_cast<size_t>(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3] / tr.block_elems) * tr.block_bytes;
}

// Everything before the data section (header, metadata, tensor infos, padding), and each tensor's offset.
absl::Status BuildHead(const std::vector<GgufKV>& metadata, const std::vector<GgufWriteTensor>& tensors,
                       const GgufWriteOptions& opts, std::vector<uint8_t>* head, uint64_t* data_bytes) {
  if (opts.version != 2 && opts.version != 3) return InvalidArgument("gguf writer: version ", opts.version);
  if (opts.alignment == 0 || !std::has_single_bit(opts.alignment) || opts.alignment > 0xffffffffu) {
    return InvalidArgument("gguf writer: alignment ", opts.alignment, " is not a power of two that fits u32");
  }
  std::vector<const GgufKV*> kvs;
  bool has_alignment_key = false;
  std::map<std::string_view, int> seen;
  for (const GgufKV& kv : metadata) {
    if (kv.key.empty()) return InvalidArgument("gguf writer: empty key");
    if (!seen.emplace(kv.key, 0).second) return InvalidArgument("gguf writer: duplicate key '", kv.key, "'");
    if (kv.key == kAlignmentKey) {
      has_alignment_key = true;
      if (kv.value.type != GgufType::kUint32 || kv.value.AsUint() != opts.alignment) {
        return InvalidArgument("gguf writer: key '", kAlignmentKey, "' disagrees with the alignment option ",
                               opts.alignment);
      }
    }
    kvs.push_back(&kv);
  }
  GgufKV alignment_kv{kAlignmentKey, GgufU32(static_cast<uint32_t>(opts.alignment))};
  if (!has_alignment_key && opts.alignment != kDefaultAlignment) kvs.push_back(&alignment_kv);

  head->clear();
  ByteSink sink(head);
  sink.Put<uint32_t>(0x46554747u);  // "GGUF" little-endian
  sink.Put<uint32_t>(opts.version);
  sink.Put<uint64_t>(tensors.size());
  sink.Put<uint64_t>(kvs.size());
  for (const GgufKV* kv : kvs) {
    sink.PutString(kv->key);
    sink.Put<uint32_t>(static_cast<uint32_t>(kv->value.type));
    TANDEM_RETURN_IF_ERROR(PutValue(sink, kv->value, 0, Cat("gguf writer: key '", kv->key, "'")));
  }
  std::map<std::string_view, int> names;
  uint64_t offset = 0;
  for (const GgufWriteTensor& t : tensors) {
    const std::string where = Cat("gguf writer: tensor '", t.name, "'");
    if (t.name.empty() || t.name.size() > kMaxNameBytes) return InvalidArgument(where, ": bad name length");
    if (!names.emplace(t.name, 0).second) return InvalidArgument(where, ": duplicate name");
    if (t.n_dims < 1 || t.n_dims > 4) return InvalidArgument(where, ": n_dims ", t.n_dims);
    const std::optional<DTypeTraits> tr = TraitsOf(static_cast<uint32_t>(t.type));
    if (!tr) return InvalidArgument(where, ": unknown type");
    uint64_t n = 1;
    for (int d = 0; d < 4; ++d) {
      if (t.ne[d] < 1 || (d >= t.n_dims && t.ne[d] != 1)) return InvalidArgument(where, ": bad ne[", d, "]");
      if (MulOverflows(n, static_cast<uint64_t>(t.ne[d]), &n)) return InvalidArgument(where, ": size overflows");
    }
    if (t.ne[0] % tr->block_elems != 0) {
      return InvalidArgument(where, ": ne[0] ", t.ne[0], " is not a multiple of ", tr->block_elems);
    }
    const uint64_t nbytes = n / static_cast<uint64_t>(tr->block_elems) * tr->block_bytes;
    if (t.produce && !t.data.empty()) return InvalidArgument(where, ": has both data and a producer");
    if (t.zeros && (t.produce || !t.data.empty())) return InvalidArgument(where, ": zeros with data or a producer");
    if (!t.produce && !t.zeros && t.data.size() != nbytes) {
      return InvalidArgument(where, ": has ", t.data.size(), " bytes of data, its shape needs ", nbytes);
    }
    sink.PutString(t.name);
    sink.Put<uint32_t>(static_cast<uint32_t>(t.n_dims));
    for (int d = 0; d < t.n_dims; ++d) sink.Put<uint64_t>(static_cast<uint64_t>(t.ne[d]));
    sink.Put<uint32_t>(static_cast<uint32_t>(t.type));
    sink.Put<uint64_t>(offset);
    offset = AlignUp(offset + nbytes, opts.alignment);
  }
  head->resize(AlignUp(head->size(), opts.alignment), 0);
  *data_bytes = offset;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> SerializeGguf(const std::vector<GgufKV>& metadata,
                                                   const std::vector<GgufWriteTensor>& tensors,
                                                   const GgufWriteOptions& opts) {
  std::vector<uint8_t> out;
  uint64_t data_bytes = 0;
  TANDEM_RETURN_IF_ERROR(BuildHead(metadata, tensors, opts, &out, &data_bytes));
  const size_t data_start = out.size();
  out.resize(data_start + data_bytes, 0);
  uint64_t offset = 0;
  for (const GgufWriteTensor& t : tensors) {
    const uint64_t nbytes = TensorBytes(t);
    if (t.produce) {
      TANDEM_RETURN_IF_ERROR(t.produce(out.data() + data_start + offset, nbytes));
    } else if (!t.data.empty()) {
      std::memcpy(out.data() + data_start + offset, t.data.data(), t.data.size());
    }
    offset = AlignUp(offset + nbytes, opts.alignment);
  }
  return out;
}

absl::Status WriteGguf(const std::string& path, const std::vector<GgufKV>& metadata,
                       const std::vector<GgufWriteTensor>& tensors, const GgufWriteOptions& opts) {
  std::vector<uint8_t> head;
  uint64_t data_bytes = 0;
  TANDEM_RETURN_IF_ERROR(BuildHead(metadata, tensors, opts, &head, &data_bytes));
  // Stream the tensors: files of real model shapes do not fit in memory twice.
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return absl::PermissionDeniedError(Cat(path, ": cannot create: ", std::strerror(errno)));
  static const uint8_t kZeros[4096] = {};
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
  std::vector<uint8_t> produced;  // reused buffer for produced tensors
  uint64_t end = head.size();  // file size so far, holes included
  for (const GgufWriteTensor& t : tensors) {
    if (!ok) break;
    if (t.zeros) {  // a hole: seek past it; the final truncate gives the file its size
      end += AlignUp(TensorBytes(t), opts.alignment);
      ok = fseeko(f, static_cast<off_t>(end), SEEK_SET) == 0;
      continue;
    }
    std::span<const uint8_t> bytes = t.data;
    if (t.produce) {
      produced.resize(TensorBytes(t));
      if (absl::Status st = t.produce(produced.data(), produced.size()); !st.ok()) {
        std::fclose(f);
        return st;
      }
      bytes = produced;
    }
    ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    uint64_t pad = AlignUp(bytes.size(), opts.alignment) - bytes.size();
    while (ok && pad > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof kZeros));
      ok = std::fwrite(kZeros, 1, n, f) == n;
      pad -= n;
    }
    end += AlignUp(bytes.size(), opts.alignment);
  }
  if (ok) ok = std::fflush(f) == 0 && ftruncate(fileno(f), static_cast<off_t>(end)) == 0;
  const int err = errno;
  if (std::fclose(f) != 0) ok = false;
  if (!ok) return absl::DataLossError(Cat(path, ": write failed: ", std::strerror(err)));
  return absl::OkStatus();
}

}  // namespace tandem
