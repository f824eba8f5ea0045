# Applies the dependent-launched add_rms_norm alone (to e21b60e's kernels.cu and dependent_launch.cuh).
import sys
root = sys.argv[1]
p = root + '/crates/groundrl-tensor/csrc/dependent_launch.cuh'
s = open(p).read()
old = '''// `kernel<<<grid, block, shared, stream>>>(args...)`, allowed to start'''
new = '''inline bool dependent_launches() {
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major >= 9;
}

// `kernel<<<grid, block, shared, stream>>>(args...)`, allowed to start'''
assert old in s
open(p, 'w').write(s.replace(old, new))
p = root + '/crates/groundrl-tensor/csrc/kernels.cu'
s = open(p).read()
old = '''  allow_dependents();  // the MLP's kernel reads its weights meanwhile, x after this one ends
  const int64_t row = blockIdx.x;'''
new = '''  allow_dependents();
  wait_prerequisites();
  const int64_t row = blockIdx.x;'''
assert old in s
s = s.replace(old, new)
old = '''  auto launch = [&](auto count) {
    add_rms_norm<decltype(count)::value><<<(unsigned)rows, (unsigned)(hidden / 8), 0, (cudaStream_t)stream>>>(
        (bf16*)x, x_row, parts, (const bf16*)w, (bf16*)out, rows, hidden, eps);
  };
  switch (splits) {
    case 1: launch(std::integral_constant<int, 1>()); break;
    case 2: launch(std::integral_constant<int, 2>()); break;
    case 3: launch(std::integral_constant<int, 3>()); break;
    default: launch(std::integral_constant<int, 4>()); break;
  }'''
new = '''  const bool early = dependent_launches();
  auto launch = [&](auto count) -> cudaError_t {
    const auto kernel = add_rms_norm<decltype(count)::value>;
    const dim3 grid((unsigned)rows), block((unsigned)(hidden / 8));
    const auto s = (cudaStream_t)stream;
    if (!early) {
      kernel<<<grid, block, 0, s>>>((bf16*)x, x_row, parts, (const bf16*)w, (bf16*)out, rows, hidden, eps);
      return cudaSuccess;
    }
    const cudaError_t e = allow_shared(kernel, 0);
    if (e != cudaSuccess) return e;
    return launch_dependent(kernel, grid, block, 0, s, (bf16*)x, x_row, parts, (const bf16*)w,
                            (bf16*)out, rows, hidden, eps);
  };
  cudaError_t e;
  switch (splits) {
    case 1: e = launch(std::integral_constant<int, 1>()); break;
    case 2: e = launch(std::integral_constant<int, 2>()); break;
    case 3: e = launch(std::integral_constant<int, 3>()); break;
    default: e = launch(std::integral_constant<int, 4>()); break;
  }
  if (e != cudaSuccess) return (int)e;'''
assert old in s
open(p, 'w').write(s.replace(old, new))
