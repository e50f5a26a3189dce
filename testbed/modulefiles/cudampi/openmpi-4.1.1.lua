-- hpcprov testbed: KISTI Neuron's cudampi/openmpi-4.1.1, backed by Debian's OpenMPI 4.1.
help([[
cudampi/openmpi-4.1.1 -- named as on KISTI Neuron (CUDA-aware OpenMPI 4.1.1).

On the hpcprov testbed this is Debian's OpenMPI 4.1 (mpirun/mpicc in
/usr/bin, built with PMIx so `srun --mpi=pmix` works; not CUDA-aware, there
is no CUDA). As on Neuron it needs gcc/10.2.0 and cuda/11.4 loaded first:

    module load gcc/10.2.0 cuda/11.4 cudampi/openmpi-4.1.1
]])
whatis("Name: openmpi")
whatis("Version: 4.1.1 (testbed: Debian OpenMPI 4.1)")
whatis("Category: mpi")
family("mpi")
prereq("gcc/10.2.0", "cuda/11.4")

local mpi_home = "/usr/lib/x86_64-linux-gnu/openmpi"
setenv("MPI_HOME", mpi_home)
setenv("MPI_ROOT", mpi_home)
setenv("OMPI_HOME", mpi_home)
setenv("MPICC", "/usr/bin/mpicc")
setenv("MPICXX", "/usr/bin/mpicxx")
setenv("MPIRUN", "/usr/bin/mpirun")
