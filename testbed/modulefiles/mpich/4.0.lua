-- hpcprov testbed: MPICH 4.0 (Debian's mpich package), its Hydra mpiexec first on PATH.
help([[
mpich/4.0 -- Debian 12's MPICH 4.0 with its Hydra process manager.

Debian installs MPICH's commands beside Open MPI's with a suffix (mpiexec.hydra,
mpicc.mpich) and lets Open MPI keep the plain names. This module puts a folder of
the plain names (mpiexec, mpirun, mpicc, mpicxx), each a link to MPICH's command,
first on PATH, as an MPICH module on a cluster does. Inside a Slurm job Hydra
starts its proxies with srun and gives each rank PMI_RANK, PMI_SIZE,
MPI_LOCALRANKID and MPI_LOCALNRANKS.

    module load gcc/10.2.0 mpich/4.0
]])
whatis("Name: mpich")
whatis("Version: 4.0 (testbed: Debian MPICH 4.0, Hydra)")
whatis("Category: mpi")
family("mpi")
prereq("gcc/10.2.0")

-- the testbed's state folder holds the links (testbed/statedir.py): this file is
-- STATE/modulefiles/mpich/4.0.lua
local state = myFileName():gsub("/modulefiles/mpich/[^/]*$", "")
prepend_path("PATH", pathJoin(state, "mpich", "bin"))
setenv("MPICC", "/usr/bin/mpicc.mpich")
setenv("MPICXX", "/usr/bin/mpicxx.mpich")
