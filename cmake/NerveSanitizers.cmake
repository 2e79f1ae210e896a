# Sanitizer builds: NERVE_SANITIZE=thread or NERVE_SANITIZE=address (AddressSanitizer + UBSan).
#
# -g1 (line tables, after the configuration's own -g, so it wins): the sanitizers' reports still name
# every frame, inlined ones included, with file and line, and there are no locals to inspect in CI
# anyway. Measured on test and library sources: 20-25 % less compile time and 4-10x smaller objects
# than -g, which CI pays twice (both sanitizer builds) on two cores.
# AddressSanitizer + UBSan build at -O1 (after the configuration's -O2, so it wins), the level
# ASan's documentation recommends: UBSan's checks made -O2 compiles of the test sources 2.5x slower
# than ASan alone, and -O1 takes 35-40 % off those. Building and running the whole suite on two
# cores: 733 s at -O2, 588 s at -O1, of which the tests 23 s and 26 s. With libstdc++'s assertions
# (bounds and preconditions): an operator[] one past a vector's end whose element is never read (an
# address taken) is no ASan report, yet undefined, and aborts programs built with them (Fedora's
# default flags).
if(NERVE_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=thread)
elseif(NERVE_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g1 -O1
                      -D_GLIBCXX_ASSERTIONS)
  add_link_options(-fsanitize=address,undefined)
elseif(NOT NERVE_SANITIZE STREQUAL "")
  message(FATAL_ERROR "NERVE_SANITIZE must be '', 'thread' or 'address', not '${NERVE_SANITIZE}'")
endif()
