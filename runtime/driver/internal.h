// Private declarations shared by the driver's translation units and its tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace rbln::driver::internal {

// Decimal digits only; nullopt for anything else or on overflow.
std::optional<uint64_t> parse_uint(const std::string& text);
// A positive byte count with an optional K, M, G, KiB, MiB or GiB suffix
// (all powers of 1024); nullopt when invalid, zero or overflowing.
std::optional<size_t> parse_bytes(const std::string& text);

// Bracket a task that touches device memory. In strict mode the arenas are
// accessible only while at least one such task runs.
void begin_memory_task();
void end_memory_task();

}  // namespace rbln::driver::internal
