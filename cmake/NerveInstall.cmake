# Installation and the exported CMake package (filled in by the packaging work).
