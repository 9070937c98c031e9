#pragma once
// The speed of a GPU's link to the host, as Linux describes its PCI Express link in sysfs: what the
// CUDA backend counts its device-to-host copies with (DeviceBackend::d2h_backlog), where the driver
// API gives no figure.

#include <optional>
#include <string>

namespace tvmm::device {

//! Of a link's speed after its line encoding, the share a pinned copy reaches: an H200 and an H100
//! copied 50.7-52.4 GB/s each way over PCIe 5.0 x16, whose 32 GT/s x 16 lanes carry 63.0 GB/s after
//! 128b/130b encoding (docs/gpu.md, "The third run").
inline constexpr double kPcieCopyShare = 0.82;

//! Bytes per second each way that copies reach over the PCI Express link of the device `bus_id`
//! (as cuDeviceGetPCIBusId gives it, "00000000:65:00.0", or as sysfs names it, "0000:65:00.0") to the
//! host, from sysfs under `pci_devices`
//! (/sys/bus/pci/devices on Linux): the slowest `max_link_speed` and the narrowest `max_link_width`
//! of the device and of every bridge above it up to its root port, after the line encoding (8b/10b up
//! to 5 GT/s, 128b/130b up to 32 GT/s, 242B/256B FLITs above), times kPcieCopyShare. The maxima, not
//! the current figures: an idle GPU trains its link down. std::nullopt where sysfs has no such device
//! or gives no usable speed or width (no PCIe, a virtual machine's bare bus, another OS).
[[nodiscard]] std::optional<double> pcie_copy_bytes_per_s(const std::string& bus_id,
                                                          const std::string& pci_devices = "/sys/bus/pci/devices");

}  // namespace tvmm::device
