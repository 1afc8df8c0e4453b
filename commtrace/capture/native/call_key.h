// Call keys: what makes two calls the same sig (wrapper.call_key).
#pragma once
#include "common.h"

namespace ct {

struct Key {
  std::vector<int64_t> v;
  bool sparse_tensor = false;  // the call is described before it runs (gloo writes a sparse result in place)
  explicit Key(int method) { v.reserve(24); v.push_back(method); }
  void add(int64_t x) { v.push_back(x); }
  void tensor(const at::Tensor& t) {
    if (!t.defined()) { add(-1); return; }
    add(t.dim());
    for (auto s : t.sizes()) add(s);
    add(int64_t(t.scalar_type()));
    add(int64_t(t.device().type()));
    if (t.layout() != c10::kStrided) sparse(t);  // one test; dense tensors never go further
  }
  // A sparse tensor's bytes are its stored parts' (ops.nbytes), not its dense shape's: what
  // fixes them is part of the key, so each size gets its own sig.
  void sparse(const at::Tensor& t) {
    sparse_tensor = true;
    add(-2 - int64_t(t.layout()));
    if (t.is_sparse()) {  // COO: int64 indices (sparse_dim x nnz), values (nnz x the dense dims)
      add(t._nnz());
      add(t.sparse_dim());
    } else if (t.is_sparse_csr()) {  // compressed (CSR, CSC, BSR, BSC): index dtype, values' shape
      auto v = t.values();
      for (auto s : v.sizes()) add(s);
      add(int64_t(v.dim()));
      bool rows = t.layout() == c10::kSparseCsr || t.layout() == c10::kSparseBsr;
      add(int64_t((rows ? t.col_indices() : t.row_indices()).scalar_type()));
    }
  }
  void tensors(const Tensors& ts) { add(int64_t(ts.size())); for (auto& t : ts) tensor(t); }
  void lists(const TensorLists& ls) { add(int64_t(ls.size())); for (auto& l : ls) tensors(l); }
  void ints(const std::vector<int64_t>& xs) { add(int64_t(xs.size())); for (auto x : xs) add(x); }
  void redop(const c10d::ReduceOp& op) { add(int64_t(op.op_)); }
};

// Method ids in the key: the Python name is what the sig's variant shows.
enum Method : int {
  M_allreduce, M_allreduce_coalesced, M_broadcast, M_reduce, M_allgather, M_allgather_coalesced,
  M__allgather_base, M_all_gather_single, M_allgather_into_tensor_coalesced, M_all_gather_single_coalesced,
  M_gather, M_scatter, M_reduce_scatter, M__reduce_scatter_base, M_reduce_scatter_single,
  M_reduce_scatter_tensor_coalesced, M_reduce_scatter_single_coalesced, M_alltoall, M_alltoall_base,
  M_all_to_all_single, M_barrier, M_monitored_barrier, M_send, M_recv, M_recv_anysource, M_gather_single,
};

}  // namespace ct
