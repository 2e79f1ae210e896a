// hwloc_xml_check.hpp — the checks a topology.xml file passes before hwloc reads it.
//
// hwloc 2.9 trusts an XML export: an object whose cpuset comes without its complete_cpuset (or
// nodeset without complete_nodeset) dereferences a NULL bitmap inside hwloc_topology_load(), and a
// bitmap written ",0x1" fails an assertion in hwloc_bitmap_sscanf(). Either kills the process, with
// libxml2 or with hwloc's own parser, so nerve scans the file first and refuses what would crash.
//
// The scan reads the XML as both of hwloc's parsers do (markup, comments, CDATA, namespace prefixes,
// either quote) and checks, for every element:
//   - each attribute whose name ends in "cpuset" or "nodeset" is an hwloc bitmap: comma-separated
//     hexadecimal words of 32 bits ("0x000000ff,,0x00000001", empty words being zero), optionally
//     after "0xf...f," (an infinite set), naming no index above max_hwloc_xml_index;
// and for every <object>, each rule found by experiment on hwloc 2.9 and by fuzzing:
//   - it has only attributes hwloc writes, and a type hwloc writes ("PU", "L2Cache", v1's "Socket");
//   - it has a cpuset unless an I/O or Misc object, a nodeset if a NUMA node;
//   - a cpuset comes with a complete_cpuset that includes it, a nodeset with a complete_nodeset;
//   - the root (the first object) allows at least one of its CPUs (allowed_cpuset);
//   - a PU's or NUMA node's os_index is a decimal number up to max_hwloc_xml_index (hwloc allocates a
//     bitmap that large: os_index="2000000000" costs it half a gigabyte).
// It also refuses what would let the file mean something else to libxml2 than to this scan: a NUL
// byte, an encoding other than UTF-8/ASCII/ISO-8859-1, text before the first tag (libxml2 detects
// EBCDIC from the first bytes), a DOCTYPE with an internal subset (entity and attribute
// declarations), duplicate attributes, mismatched tags, and nesting deeper than libxml2's own limit
// of 256 elements (hwloc's parser, without that limit, recurses once per level).
//
// Every valid export passes: lstopo's of real and synthetic machines, with or without I/O, in the v2
// format and in the v1 format (--export-xml-flags v1). Questions hwloc answers cleanly itself (a child
// outside its parent's cpuset, a NUMA node inside a PCI device) are left to it.
//
// Linear in the size of the text; no recursion.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nerve::topology {

// The largest CPU or NUMA node index a topology.xml file may name: 2^20 - 1, far beyond the 8192 CPUs
// and 1024 nodes Linux supports, and small enough that no hwloc bitmap outgrows 128 KiB.
inline constexpr std::uint32_t max_hwloc_xml_index = (1u << 20) - 1;

// find_hwloc_xml_problem() returns what is wrong with the hwloc XML document `xml`, as
// "line 17: object PU: cpuset without complete_cpuset (...)", or nullopt when hwloc may read it.
std::optional<std::string> find_hwloc_xml_problem(std::string_view xml);

}  // namespace nerve::topology
