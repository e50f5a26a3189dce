-- hpcprov testbed: KISTI Neuron's cuda/11.4. There is no CUDA on the testbed.
help([[
cuda/11.4 -- named as on KISTI Neuron.

THE TESTBED HAS NO CUDA AND NO GPU. This module only sets CUDA_HOME/CUDA_PATH
to /apps/cuda/11.4 (Neuron's layout), a path that does NOT exist here, and
puts its bin/ and lib64/ on PATH/LD_LIBRARY_PATH so scripts that expect the
variables find them. The "GPUs" of the testbed are Slurm gres backed by dummy
character devices: Slurm sets CUDA_VISIBLE_DEVICES, nothing more.
]])
whatis("Name: cuda")
whatis("Version: 11.4 (testbed: placeholder, no CUDA installed)")
whatis("Category: library")

local cuda_home = "/apps/cuda/11.4"
setenv("CUDA_HOME", cuda_home)
setenv("CUDA_PATH", cuda_home)
setenv("CUDA_VERSION", "11.4")
append_path("PATH", pathJoin(cuda_home, "bin"))
append_path("LD_LIBRARY_PATH", pathJoin(cuda_home, "lib64"))
