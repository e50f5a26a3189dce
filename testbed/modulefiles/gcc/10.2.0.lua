-- hpcprov testbed: KISTI Neuron's gcc/10.2.0, backed by this machine's GCC.
help([[
gcc/10.2.0 -- named as on KISTI Neuron.

On the hpcprov testbed this module points at the machine's own GCC
(Debian's gcc/g++, /usr/bin; its version is whatever Debian ships, not
10.2.0). It only sets CC/CXX and the compiler family, so job scripts written
for Neuron (`module load gcc/10.2.0 ...`) run unchanged.
]])
whatis("Name: gcc")
whatis("Version: 10.2.0 (testbed: system GCC in /usr/bin)")
whatis("Category: compiler")
family("compiler")

setenv("CC", "/usr/bin/gcc")
setenv("CXX", "/usr/bin/g++")
setenv("GCC_HOME", "/usr")
