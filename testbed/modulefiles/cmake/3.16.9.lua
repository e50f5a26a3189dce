-- hpcprov testbed: KISTI Neuron's cmake/3.16.9, backed by Debian's CMake.
help([[
cmake/3.16.9 -- named as on KISTI Neuron.

On the hpcprov testbed this is the machine's own CMake (Debian's, /usr/bin/cmake,
version 3.25 on Debian 12, not 3.16.9). The module sets CMAKE_COMMAND so job
scripts can find it the same way on both.
]])
whatis("Name: cmake")
whatis("Version: 3.16.9 (testbed: system CMake in /usr/bin)")
whatis("Category: tools")

setenv("CMAKE_COMMAND", "/usr/bin/cmake")
