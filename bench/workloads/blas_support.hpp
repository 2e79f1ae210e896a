// blas_support.hpp — what the dense workloads (W6 W7 W10 W11) share: OpenBLAS thread control,
// reproducible inputs and the tile layout of a square matrix.
//
// OpenBLAS threads: Debian installs the pthread build of OpenBLAS (libopenblas0-pthread), whose
// thread count is one process-wide setting. Tile kernels run inside tasks, one per worker, so they
// must use one thread each (otherwise every tile call would fork T more threads onto the same cores);
// the "multithreaded BLAS" baselines use T. BlasThreads sets the count for a scope. It is not safe to
// change while BLAS calls are running on other threads: the workloads switch it only between samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace nerve::bench {

void set_blas_threads(int threads);
int blas_threads();
// blas_description() is OpenBLAS's build configuration (e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH ...").
std::string blas_description();

// BlasThreads sets OpenBLAS's thread count for its lifetime and restores the previous one after.
class BlasThreads {
 public:
  explicit BlasThreads(int threads) : previous_(blas_threads()) { set_blas_threads(threads); }
  ~BlasThreads() { set_blas_threads(previous_); }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int previous_;
};

// uniform() is a reproducible pseudo-random number in (0, 1) for index i of stream `seed`
// (SplitMix64: no state, so inputs can be filled in parallel by any runtime and still agree).
inline double uniform(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (static_cast<double>(z >> 11) + 0.5) * 0x1.0p-53;
}

// TileLayout stores an n × n matrix as nt × nt tiles of nb × nb, each tile contiguous and
// column-major (leading dimension nb), tiles in column-major order. A tile is then one slice of a
// nerve::Buffer and one dependency object for OpenMP, and a tile kernel touches one block of memory.
struct TileLayout {
  std::size_t n = 0, nb = 0, nt = 0;
  TileLayout(std::size_t size, std::size_t tile) : n(size), nb(tile), nt(size / tile) {}
  std::size_t tile_elements() const { return nb * nb; }
  std::size_t offset(std::size_t i, std::size_t j) const { return (j * nt + i) * tile_elements(); }
  // Element (r, c) of the matrix.
  std::size_t index(std::size_t r, std::size_t c) const {
    return offset(r / nb, c / nb) + (c % nb) * nb + r % nb;
  }
};

// Conversions between a column-major n × n matrix and the tile layout.
void to_tiles(const TileLayout& layout, std::span<const double> column_major, std::span<double> tiles);
void from_tiles(const TileLayout& layout, std::span<const double> tiles, std::span<double> column_major);

// spd_matrix() is the W6 input: symmetric, entries in (0, 1), plus n on the diagonal (so SPD),
// column-major, both triangles filled.
std::vector<double> spd_matrix(std::size_t n, std::uint64_t seed);

// cholesky_probe_error() checks a Cholesky factor cheaply at any size: for a random vector x it
// returns ‖A x − L (Lᵀ x)‖ / (‖A‖_F ‖x‖), with A the column-major input (lower triangle read) and L
// the lower triangle of `factor`, column-major. O(n²). A correct factor gives ~1e-16; a factor with
// one wrong element gives ~its error.
double cholesky_probe_error(std::size_t n, std::span<const double> a, std::span<const double> factor);

// cholesky_residual() is ‖A − L Lᵀ‖_F / ‖A‖_F over the lower triangle, computed in full (O(n³): for
// n = 1024, as WORKLOADS.md asks).
double cholesky_residual(std::size_t n, std::span<const double> a, std::span<const double> factor);

// gemm_probe_error() returns ‖C x − A (B x)‖ / (‖A‖_F ‖B‖_F ‖x‖) for column-major n × n matrices.
double gemm_probe_error(std::size_t n, std::span<const double> a, std::span<const double> b,
                        std::span<const double> c);

}  // namespace nerve::bench
