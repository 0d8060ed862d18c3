# src/kernels, CUDA part: the device kernels compiled to a fat binary and
# embedded in libgcoll, loaded at run time through dlopen("libcuda.so.1").
# libgcoll links no CUDA library. nvcc gets only the flags below: never the
# sanitizer or warning flags meant for the host compiler.

EXTRA_DIST += src/kernels/gen_kernels.sh src/kernels/coll_kernels.cu src/kernels/bin2c.c \
	src/kernels/prims_cuda.cuh src/kernels/reduce_cuda.cuh src/kernels/coll_device.cuh \
	src/kernels/p2p_device.cuh src/kernels/p2p_wire.h \
	tests/unit/test_reduce_cuda.cu tests/unit/test_prims_cuda_emu.cu tests/unit/prims_emu_fifo.c \
	tests/gpu/cuda_probe.c tests/gpu/gpu_coll_check.c tests/gpu/test_cuda_build.sh \
	tests/gpu/gpu_coll_check.sh tests/gpu/nccl_bench.c tests/gpu/bench_reduce_copy.cu \
	tests/gpu/device_run.sh tests/gpu/stage_device.sh tests/gpu/torch_check.py \
	tests/gpu/torch_ddp_check.py \
	src/kernels/cuda_loader.c src/kernels/cuda_loader.h src/kernels/cuda_fatbin.c \
	src/kernels/cuda_fatbin.h src/kernels/cuda_work.h src/kernels/cuda_exec.c \
	src/kernels/cuda_exec.h src/kernels/exec_cuda.c

if HAVE_CUDA
NVCC_GENCODE = -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
NVCC_FLAGS = -std=c++17 -O3 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror \
	-I$(top_srcdir)/include -I$(top_srcdir)/src -I$(top_builddir)/src
NVCC_DEPS = $(top_srcdir)/src/kernels/coll_kernels.cu \
	$(top_srcdir)/src/kernels/prims_cuda.cuh $(top_srcdir)/src/kernels/reduce_cuda.cuh \
	$(top_srcdir)/src/kernels/coll_device.cuh $(top_srcdir)/src/kernels/reduce.h \
	$(top_srcdir)/src/kernels/half.h \
	$(top_srcdir)/src/kernels/algo_ring.h $(top_srcdir)/src/kernels/algo_tree.h \
	$(top_srcdir)/src/kernels/coll_geometry.h $(top_srcdir)/src/kernels/p2p_device.cuh \
	$(top_srcdir)/src/kernels/p2p_wire.h $(top_srcdir)/src/kernels/cuda_work.h \
	$(top_srcdir)/src/kernels/cuda_loader.h \
	$(top_srcdir)/include/gcoll.h $(top_srcdir)/include/gcoll_plan.h
CUDA_GENERATED = src/kernels/coll_reduce_table.cuh src/kernels/coll_algo_table.cuh \
	src/kernels/coll_table.c

# Host side (plain C, no toolkit headers): the driver loader, the fatbin
# lister, the executor.
libgcoll_la_SOURCES += src/kernels/cuda_loader.c src/kernels/cuda_loader.h \
	src/kernels/cuda_fatbin.c src/kernels/cuda_fatbin.h src/kernels/cuda_work.h \
	src/kernels/cuda_exec.c src/kernels/cuda_exec.h src/kernels/exec_cuda.c
nodist_libgcoll_la_SOURCES = src/kernels/coll_table.c src/kernels/coll_fatbin.c
noinst_PROGRAMS += src/kernels/gcoll-bin2c
src_kernels_gcoll_bin2c_SOURCES = src/kernels/bin2c.c
CLEANFILES = $(CUDA_GENERATED) src/kernels/coll_kernels.fatbin src/kernels/coll_fatbin.c

# One rule writes all three tables (a stamp-free multi-target rule is safe
# here: the script rewrites every file on each run).
$(CUDA_GENERATED): $(top_srcdir)/src/kernels/gen_kernels.sh
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/src/kernels/gen_kernels.sh src/kernels

src/kernels/coll_kernels.fatbin: $(NVCC_DEPS) $(CUDA_GENERATED)
	$(AM_V_GEN)$(MKDIR_P) src/kernels && \
	$(NVCC) --fatbin $(NVCC_GENCODE) $(NVCC_FLAGS) -o $@.tmp \
	  $(top_srcdir)/src/kernels/coll_kernels.cu && mv -f $@.tmp $@

src/kernels/coll_fatbin.c: src/kernels/coll_kernels.fatbin src/kernels/gcoll-bin2c$(EXEEXT)
	$(AM_V_GEN)src/kernels/gcoll-bin2c$(EXEEXT) src/kernels/coll_kernels.fatbin \
	  gcoll_cuda_fatbin > $@.tmp && mv -f $@.tmp $@

if HAVE_CMOCKA
# reduce_cuda.cuh's __host__ __device__ code compiled by nvcc for the host
# and checked against reduce.c. nvcc adds fat-binary registration calls to
# every object it compiles, so the test links cudart_static (which only
# records them; it needs no driver unless a kernel is launched).
check_PROGRAMS += tests/unit/test_reduce_cuda
TESTS += tests/unit/test_reduce_cuda
tests_unit_test_reduce_cuda_SOURCES =
tests_unit_test_reduce_cuda_LDADD = tests/unit/test_reduce_cuda_host.o $(UNIT_LDADD) \
	-L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lpthread -lrt -lstdc++
EXTRA_tests_unit_test_reduce_cuda_DEPENDENCIES = tests/unit/test_reduce_cuda_host.o
CLEANFILES += tests/unit/test_reduce_cuda_host.o
tests/unit/test_reduce_cuda_host.o: $(top_srcdir)/tests/unit/test_reduce_cuda.cu \
		$(top_srcdir)/src/kernels/reduce_cuda.cuh $(top_srcdir)/src/kernels/reduce.h \
		$(top_srcdir)/src/kernels/half.h
	$(AM_V_GEN)$(MKDIR_P) tests/unit && \
	$(NVCC) -c -std=c++17 -O2 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror \
	  -I$(top_srcdir)/include -I$(top_srcdir)/src $(CMOCKA_CFLAGS) \
	  -o $@ $(top_srcdir)/tests/unit/test_reduce_cuda.cu

# The kernel body (coll_device.cuh) run on the CPU with pthreads as a
# block's threads (GCOLL_CUDA_EMULATE): the step protocol, LL, trees,
# failures and deadlines, against reduce.c. Not the GPU memory model.
check_PROGRAMS += tests/unit/test_prims_cuda_emu
TESTS += tests/unit/test_prims_cuda_emu
tests_unit_test_prims_cuda_emu_SOURCES = tests/unit/prims_emu_fifo.c
tests_unit_test_prims_cuda_emu_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_prims_cuda_emu_LDADD = tests/unit/test_prims_cuda_emu_host.o $(UNIT_LDADD) \
	-L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lpthread -lrt -lstdc++
EXTRA_tests_unit_test_prims_cuda_emu_DEPENDENCIES = tests/unit/test_prims_cuda_emu_host.o
CLEANFILES += tests/unit/test_prims_cuda_emu_host.o
tests/unit/test_prims_cuda_emu_host.o: $(top_srcdir)/tests/unit/test_prims_cuda_emu.cu \
		$(NVCC_DEPS)
	$(AM_V_GEN)$(MKDIR_P) tests/unit && \
	$(NVCC) -c -std=c++17 -O2 -DGCOLL_CUDA_EMULATE -Werror all-warnings \
	  -Xcompiler -Wall,-Wextra,-Werror,-pthread -I$(top_srcdir)/include -I$(top_srcdir)/src \
	  $(CMOCKA_CFLAGS) -o $@ $(top_srcdir)/tests/unit/test_prims_cuda_emu.cu
endif

# What the build produced, checked without a GPU: images in the fatbin,
# no CUDA library in libgcoll's dependencies, the host path running with
# no driver, the loader's probe on the toolkit's stub driver.
check_PROGRAMS += tests/gpu/cuda_probe tests/gpu/gpu_coll_check
tests_gpu_cuda_probe_SOURCES = tests/gpu/cuda_probe.c
tests_gpu_cuda_probe_LDADD = libgcoll_internal.la
tests_gpu_gpu_coll_check_SOURCES = tests/gpu/gpu_coll_check.c
tests_gpu_gpu_coll_check_LDADD = libgcoll_internal.la
TESTS += tests/gpu/test_cuda_build.sh tests/gpu/gpu_coll_check.sh

# GPU benchmarks (tests/gpu/device_run.sh runs them on a lent GPU; built
# here so they keep compiling): ncclAllReduce through any libnccl.so.2, and
# reduceCopy against cudaMemcpy.
check_PROGRAMS += tests/gpu/nccl_bench tests/gpu/bench_reduce_copy
tests_gpu_nccl_bench_SOURCES = tests/gpu/nccl_bench.c
tests_gpu_nccl_bench_CPPFLAGS = -I$(CUDA_HOME)/include
tests_gpu_nccl_bench_LDADD = -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lpthread -lrt
tests_gpu_bench_reduce_copy_SOURCES =
tests_gpu_bench_reduce_copy_LDADD = tests/gpu/bench_reduce_copy.o \
	-L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lpthread -lrt -lstdc++
EXTRA_tests_gpu_bench_reduce_copy_DEPENDENCIES = tests/gpu/bench_reduce_copy.o
CLEANFILES += tests/gpu/bench_reduce_copy.o
tests/gpu/bench_reduce_copy.o: $(top_srcdir)/tests/gpu/bench_reduce_copy.cu \
		$(top_srcdir)/src/kernels/reduce_cuda.cuh $(top_srcdir)/src/kernels/reduce.h \
		$(top_srcdir)/src/kernels/half.h $(top_srcdir)/src/kernels/cuda_work.h
	$(AM_V_GEN)$(MKDIR_P) tests/gpu && \
	$(NVCC) -c $(NVCC_GENCODE) $(NVCC_FLAGS) -o $@ $(top_srcdir)/tests/gpu/bench_reduce_copy.cu
endif
