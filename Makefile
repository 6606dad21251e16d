# weft - build, test, run.  `make run` and `make test` are the two quick-start commands.
#
# Layout: every .c under common/ kernels/ topo/ comm/ and comm/<transport>/ goes into
# libweft, except files ending in _cli.c (programs). Programs: tools/weftrun.c, topo/weft_topo_cli.c,
# tools/weft_sim_cli.c (weft-sim, with bench/perf_colls.c's counts and bandwidth factors),
# bench/*_perf.c (with the driver bench/perf_common.c, the collectives bench/perf_colls.c and
# the weft backend bench/perf_weft.c; overlap_perf with OpenBLAS instead), and
# bench/mpi_coll_perf.c, the MPI backend, with the same driver and collectives (when mpicc
# exists).
# Tests: every tests/test_*.c becomes build/tests/test_*; tests/run.sh runs the suite.
# tests/probe_*.c become build/tests/probe_*, programs the test scripts start.

# `make` alone builds `all` (README's table), whichever rule the file happens to read first
.DEFAULT_GOAL := all

CC      ?= gcc
PREFIX  ?= /usr/local
BUILD   ?= build
OPT     ?= -O3
SAN     ?=

CFLAGS_BASE = -std=gnu11 -g $(OPT) -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
              -fPIC -pthread -fno-strict-aliasing
INCS    = -Iinclude -Icommon -Ikernels -Itopo -Icomm
HWLOC_CFLAGS := $(shell pkg-config --cflags hwloc 2>/dev/null)
HWLOC_LIBS   := $(shell pkg-config --libs hwloc 2>/dev/null)
ifneq ($(SAN),)
CFLAGS_BASE += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDSAN    = -fsanitize=$(SAN)
endif
# The UCX transport (comm/ucx/) is built when pkg-config finds UCX (Debian: libucx-dev);
# without it the library has shm and tcp only, and WEFT_TRANSPORT=ucx finds no transport.
# Nothing links UCX: the transport opens libucp.so.0 when it is used (comm/ucx/ucx_api.h).
HAVE_UCX    := $(shell pkg-config --exists ucx 2>/dev/null && echo 1)
ifeq ($(HAVE_UCX),1)
UCX_CFLAGS  := $(shell pkg-config --cflags ucx) -DWEFT_HAVE_UCX
else
$(info weft: UCX not found (pkg-config ucx; Debian: libucx-dev): the UCX transport is skipped)
endif
# CUDA (docs/GPU.md): with $(CUDA_HOME)/bin/nvcc present, libweft gets the CUDA kernels
# (kernels/cuda/*.cu, nvcc) and the stream calls of include/weft_cuda.h (kernels/cuda/*.c),
# cudart linked statically (it loads the driver at run time, so libweft still runs on a
# machine without one), and build/lib/libweft_nccl.so, the NCCL-API shim (nccl/). CUDA=0,
# or no nvcc, builds everything else. CUDA_GENCODE: sm_90 code (H100/H200) plus its PTX,
# which the driver compiles for any newer GPU.
CUDA_HOME   ?= /usr/local/cuda
CUDA        ?= $(if $(wildcard $(CUDA_HOME)/bin/nvcc),1,0)
NVCC        ?= $(CUDA_HOME)/bin/nvcc
CUDA_GENCODE ?= -gencode=arch=compute_90,code=[sm_90,compute_90]
ifeq ($(CUDA),1)
CUDA_CFLAGS := -DWEFT_HAVE_CUDA -I$(CUDA_HOME)/include -Ikernels/cuda
CUDA_LIBS   := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lstdc++
endif
CFLAGS  += $(CFLAGS_BASE) $(INCS) $(HWLOC_CFLAGS) $(UCX_CFLAGS) $(CUDA_CFLAGS)
LDLIBS  += $(HWLOC_LIBS) $(CUDA_LIBS) -lrt -lm -pthread $(LDSAN)

LIB_SRC  := $(filter-out %_cli.c,$(wildcard common/*.c kernels/*.c topo/*.c comm/*.c comm/*/*.c))
ifneq ($(HAVE_UCX),1)
LIB_SRC  := $(filter-out comm/ucx/%,$(LIB_SRC))
endif
ifeq ($(CUDA),1)
LIB_SRC  += $(wildcard kernels/cuda/*.c)
CU_SRC   := $(wildcard kernels/cuda/*.cu)
endif
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
PERF_SRC := $(filter-out bench/mpi_coll_perf.c,$(wildcard bench/*_perf.c))
PERF_BIN := $(PERF_SRC:bench/%.c=$(BUILD)/bin/%)
TEST_SRC := $(wildcard tests/test_*.c)
ifneq ($(CUDA),1)
# the shim's and the GPU's tests need the CUDA build (tests/run.sh says they were skipped)
TEST_SRC := $(filter-out tests/test_nccl_shim.c tests/test_cuda.c tests/test_devbuf_emu.c,$(TEST_SRC))
endif
# tests/probe_*.c: programs a test script runs under a launcher (not tests themselves)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%) \
            $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/probe_*.c))
# weft's verbs emulator, for the ib transport's tests (rule below)
IBEMU    := $(BUILD)/lib/libweft_ibemu.so
TOOLS    := $(BUILD)/bin/weftrun $(BUILD)/bin/weft-topo $(BUILD)/bin/weft-sim \
            $(BUILD)/bin/core_rtt
# The trainer: kernels/nn/ (model kernels), shard/ (FSDP/ZeRO units over weft's
# collectives) and trainer/ go into libweft_train.a, which needs OpenBLAS (libweft itself
# does not); trainer/weft_train_cli.c is weft-train.
TRAIN_SRC := $(filter-out %_cli.c,$(wildcard kernels/nn/*.c shard/*.c trainer/*.c))
TRAIN_OBJ := $(TRAIN_SRC:%.c=$(BUILD)/obj/%.o)
TRAIN_LIB := $(BUILD)/lib/libweft_train.a
TRAIN_BIN := $(BUILD)/bin/weft-train
PLAN_BIN  := $(BUILD)/bin/weft-plan
KJV       := $(BUILD)/data/kjv.txt
# The trainer's GPU path (weft-train --device cuda; docs/GPU-TRAIN.md): the model kernels
# kernels/nn/cuda/*.cu, compiled by nvcc into libweft_train.a, and trainer/gpt2_cuda.c
# with WEFT_TRAIN_CUDA; they use the static cudart libweft links (CUDA_LIBS; cuBLAS is
# dlopen'ed by the first --device cuda run, so the CPU path maps none of it). Built with
# the CUDA parts above (CUDA, NVCC, CUDA_HOME); `make CUDA=0` builds without it, and
# --device cuda then says so. Code: CUDA_GENCODE's (TRAIN_CUDA_ARCH to change). The stamp
# rebuilds gpt2_cuda.o when CUDA changes between builds in one BUILD directory
TRAIN_CUDA_ARCH ?= $(CUDA_GENCODE)
TRAIN_NVCCFLAGS  = -std=c++17 -g -lineinfo $(OPT) $(TRAIN_CUDA_ARCH) -Werror all-warnings \
             -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter,-fPIC -Ikernels/nn/cuda
ifeq ($(CUDA),1)
TRAIN_OBJ    += $(patsubst %.cu,$(BUILD)/obj/%.o,$(wildcard kernels/nn/cuda/*.cu))
$(BUILD)/obj/trainer/gpt2_cuda.o: CFLAGS += -DWEFT_TRAIN_CUDA -I$(CUDA_HOME)/include \
    -Ikernels/nn/cuda -DWEFT_CUDA_LIBDIR='"$(CUDA_HOME)/lib64"'
else ifneq ($(CUDA),0)
$(error CUDA must be 0 or 1)
endif
# (rewritten at parse time only when CUDA changes: a stamp made by a rule would count as
# intermediate under .SECONDARY, and a missing one would not force the rebuild)
TRAIN_CUDA_STAMP := $(BUILD)/train-cuda.stamp
$(shell mkdir -p $(BUILD) && [ "$$(cat $(TRAIN_CUDA_STAMP) 2>/dev/null)" = "$(CUDA)" ] || \
    echo $(CUDA) > $(TRAIN_CUDA_STAMP))
$(BUILD)/obj/trainer/gpt2_cuda.o: $(TRAIN_CUDA_STAMP)

$(BUILD)/obj/kernels/nn/cuda/%.o: kernels/nn/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(TRAIN_NVCCFLAGS) -MMD -MP -c $< -o $@

# test_train_gpu_emu: test_train_gpu's GPU comparisons with gpt2_cuda.c's host half over
# tests/emu_cuda_host.c (the CUDA runtime, cuBLAS and the kcu_* kernels on the host), so
# the orchestration is checked where no GPU is; the .cu kernels need the real test.
ifeq ($(CUDA),1)
TEST_BIN += $(BUILD)/tests/test_train_gpu_emu
EMU_CFLAGS = -DWEFT_TRAIN_CUDA -I$(CUDA_HOME)/include -Ikernels/nn/cuda -Itrainer -Ishard \
             -Ikernels/nn -fopenmp-simd -fno-math-errno
# -rdynamic: gpt2_cuda.c finds the emulated cuBLAS in the program (dlsym) before any library.
# EMU_LINK: libweft.a's CUDA objects pull in the static cudart, which defines the runtime
# calls the emulation defines too; the emulation's object comes first and wins, and the
# runs set WEFT_CUDA=0 so libweft itself never asks the (driverless) runtime anything.
EMU_LINK = -rdynamic -Wl,--allow-multiple-definition
$(BUILD)/obj/emu/gpt2_cuda.o: trainer/gpt2_cuda.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(EMU_CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/emu/test_train_gpu.o: tests/test_train_gpu.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(EMU_CFLAGS) -DTRAIN_GPU_EMU -MMD -MP -c $< -o $@
$(BUILD)/obj/emu/emu_cuda_host.o: tests/emu_cuda_host.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(EMU_CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/emu/emu_cudart.o: tests/emu_cudart.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(EMU_CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/tests/test_train_gpu_emu: $(BUILD)/obj/emu/test_train_gpu.o $(BUILD)/obj/emu/gpt2_cuda.o \
    $(BUILD)/obj/emu/emu_cuda_host.o $(BUILD)/obj/emu/emu_cudart.o $(TRAIN_LIB) $(BUILD)/lib/libweft.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_LINK) -o $@ $^ -lopenblas -ldl $(LDLIBS)
# test_devbuf_emu: its own cudaGetDeviceCount and cudaPointerGetAttributes ahead of the
# static cudart (EMU_LINK), so that weft.h's calls meet a "device" buffer where no GPU is
$(BUILD)/tests/test_devbuf_emu: $(BUILD)/obj/tests/test_devbuf_emu.o $(BUILD)/lib/libweft.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_LINK) -o $@ $^ $(LDLIBS)
# test_nccl_shim_emu: test_nccl_shim's GPU half (device all-reduce, PreMulSum, ncclAvg, a
# mixed group) through the shim's objects over the same runtime emulation, so its groups,
# point-to-point plans and op mapping run over real weft collectives where no GPU is
TEST_BIN += $(BUILD)/tests/test_nccl_shim_emu
$(BUILD)/obj/emu/test_nccl_shim.o: tests/test_nccl_shim.c
	@mkdir -p $(dir $@)
	$(CC) -Inccl $(CFLAGS) -I$(CUDA_HOME)/include -DSHIM_EMU -MMD -MP -c $< -o $@
# gpt2_cuda.c's half for builds without CUDA (make CUDA=0) compiles in every build, so a
# change that breaks it shows here and not first on a machine without nvcc
TEST_BIN += $(BUILD)/obj/nocuda/gpt2_cuda.o
$(BUILD)/obj/nocuda/gpt2_cuda.o: trainer/gpt2_cuda.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itrainer -Ishard -Ikernels/nn -MMD -MP -c $< -o $@
# weft-train over the same emulation, for tests/test_train_gpu_emu.sh (--device cuda end
# to end: the step, val, checkpoints and resume, the saved model)
TEST_BIN += $(BUILD)/tests/probe_train_emu
$(BUILD)/tests/probe_train_emu: $(BUILD)/obj/trainer/weft_train_cli.o $(BUILD)/obj/emu/gpt2_cuda.o \
    $(BUILD)/obj/emu/emu_cuda_host.o $(BUILD)/obj/emu/emu_cudart.o $(TRAIN_LIB) $(BUILD)/lib/libweft.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_LINK) -o $@ $^ -lopenblas -ldl $(LDLIBS)
endif
# The MPI peers: Open MPI's and MPICH's compilers by their own names, so installing both
# (Debian's alternatives pick one `mpicc`) never mixes them up.
MPICC    := $(shell command -v mpicc.openmpi 2>/dev/null || command -v mpicc 2>/dev/null)
MPICHCC  := $(shell command -v mpicc.mpich 2>/dev/null)
MPI_BIN  := $(if $(MPICC),$(BUILD)/bin/mpi_coll_perf) $(if $(MPICHCC),$(BUILD)/bin/mpich_coll_perf)

.PHONY: all lib tools tests test run deps install clean help fuzz
.SECONDARY:

all: lib tools $(PERF_BIN) $(MPI_BIN) $(TRAIN_BIN) $(PLAN_BIN)

NCCL_SHIM := $(if $(filter 1,$(CUDA)),$(BUILD)/lib/libweft_nccl.so $(BUILD)/lib/libnccl.so \
                 $(BUILD)/include/nccl.h)
lib: $(BUILD)/lib/libweft.so $(BUILD)/lib/libweft.so.0 $(BUILD)/lib/libweft.a $(NCCL_SHIM)
tools: $(TOOLS)
tests: $(TEST_BIN) $(IBEMU)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# nvcc compiles host code with the same hiding as the C objects.
$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O3 -g $(CUDA_GENCODE) -Xcompiler -fPIC,-fvisibility=hidden,-Wall \
	    -Werror all-warnings $(INCS) -Ikernels/cuda -MMD -MP -c $< -o $@

$(BUILD)/lib/libweft.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The library's objects hide every symbol that include/weft.h does not declare, and the
# version script keeps anything else local: libweft.so exports the weft_* API only
# (tests/test_symbols.sh). The file is libweft.so.0, its soname; libweft.so links to it,
# so a program linked with -Lbuild/lib -lweft finds libweft.so.0 beside it at run time.
$(LIB_OBJ): CFLAGS += -fvisibility=hidden

$(BUILD)/lib/libweft.so.0: $(LIB_OBJ) weft.map
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libweft.so.0 -Wl,--version-script,weft.map -o $@ \
	    $(LIB_OBJ) $(LDLIBS)

$(BUILD)/lib/libweft.so: $(BUILD)/lib/libweft.so.0
	ln -sf libweft.so.0 $@

LIBA = $(BUILD)/lib/libweft.a

# The NCCL-API shim: nccl/*.c over libweft's objects, one .so whose soname is NCCL's
# (libnccl.so.2), exporting only nccl* (nccl/nccl.map); libnccl.so and libnccl.so.2 link
# to it and build/include/nccl.h is nccl/nccl.h, so NCCL_HOME=build builds and runs
# programs written for NCCL (nccl-tests) against weft.
SHIM_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard nccl/*.c))
# -Inccl first: CUDA 13 ships NCCL's own nccl.h in $(CUDA_HOME)/include
$(SHIM_OBJ): CFLAGS := -Inccl $(CFLAGS) -fvisibility=hidden

$(BUILD)/lib/libweft_nccl.so: $(SHIM_OBJ) $(LIB_OBJ) nccl/nccl.map
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libnccl.so.2 -Wl,--version-script,nccl/nccl.map -o $@ \
	    $(SHIM_OBJ) $(LIB_OBJ) $(LDLIBS)

$(BUILD)/lib/libnccl.so: $(BUILD)/lib/libweft_nccl.so
	ln -sf libweft_nccl.so $(BUILD)/lib/libnccl.so.2
	ln -sf libnccl.so.2 $@

$(BUILD)/include/nccl.h: nccl/nccl.h
	@mkdir -p $(dir $@)
	cp $< $@

# weft's verbs emulator (tests/ibemu/): the verbs table the ib transport loads in place of
# rdma-core when WEFT_IB_VERBS names it, so the transport's tests run without an RDMA
# device. Not part of libweft.
$(IBEMU): $(BUILD)/obj/tests/ibemu/ibemu.o
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $^ -lrt -pthread $(LDSAN)

$(BUILD)/bin/weftrun: $(BUILD)/obj/tools/weftrun.o $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/bin/weft-topo: $(BUILD)/obj/topo/weft_topo_cli.o $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS)

# weft-sim: the simulator (comm/simtime.c) with nccl-tests' counts and bandwidth factors
$(BUILD)/bin/weft-sim: $(BUILD)/obj/tools/weft_sim_cli.o $(BUILD)/obj/bench/perf_colls.o $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS)

# core_rtt: a cache line's round trip between two cores (bench/core_rtt.c; no libweft)
$(BUILD)/bin/core_rtt: $(BUILD)/obj/bench/core_rtt.o
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDSAN)

PERF_DRIVER := bench/perf_common.c bench/perf_colls.c
PERF_OBJ    := $(PERF_DRIVER:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/bench/perf_weft.o

$(BUILD)/bin/%_perf: $(BUILD)/obj/bench/%_perf.o $(PERF_OBJ) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS)

# overlap_perf (a nonblocking all-gather behind sgemm) needs OpenBLAS and not perf_common;
# an explicit rule wins over the pattern above.
$(BUILD)/bin/overlap_perf: $(BUILD)/obj/bench/overlap_perf.o $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ -lopenblas $(LDLIBS)

# The MPI peers: the driver and the collectives with the MPI backend, each MPI's compiler
# building all three (no libweft; only include/weft.h's types).
MPI_CFLAGS = -std=gnu11 -O2 -g -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
MPI_SRC    = bench/mpi_coll_perf.c $(PERF_DRIVER)

$(BUILD)/bin/mpi_coll_perf: $(MPI_SRC) bench/perf_common.h include/weft.h
	@mkdir -p $(dir $@)
	$(MPICC) $(MPI_CFLAGS) -o $@ $(MPI_SRC)

$(BUILD)/bin/mpich_coll_perf: $(MPI_SRC) bench/perf_common.h include/weft.h
	@mkdir -p $(dir $@)
	$(MPICHCC) $(MPI_CFLAGS) -o $@ $(MPI_SRC)

$(TRAIN_OBJ) $(BUILD)/obj/trainer/weft_train_cli.o $(BUILD)/obj/trainer/weft_plan_cli.o \
    $(BUILD)/obj/tests/test_train.o $(BUILD)/obj/tests/test_nn.o \
    $(BUILD)/obj/tests/test_shard_order.o \
    $(BUILD)/obj/tests/test_train_gpu.o: \
    CFLAGS += -Itrainer -Ishard -Ikernels/nn -fopenmp-simd -fno-math-errno

$(TRAIN_LIB): $(TRAIN_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(TRAIN_BIN): $(BUILD)/obj/trainer/weft_train_cli.o $(TRAIN_LIB) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ -lopenblas $(LDLIBS)

# weft-plan: the sizing calculator (shard/plan.c; the model's sizes from trainer/)
$(PLAN_BIN): $(BUILD)/obj/trainer/weft_plan_cli.o $(TRAIN_LIB) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ -lopenblas $(LDLIBS)

$(BUILD)/tests/test_train $(BUILD)/tests/test_nn $(BUILD)/tests/test_train_gpu \
    $(BUILD)/tests/test_shard_order: $(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TRAIN_LIB) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ -lopenblas $(LDLIBS)

# the shim's test links the shim as nccl-tests do (-lnccl), through its soname
$(BUILD)/obj/tests/test_nccl_shim.o: CFLAGS := -Inccl $(CFLAGS)
$(BUILD)/tests/test_nccl_shim: $(BUILD)/obj/tests/test_nccl_shim.o $(BUILD)/lib/libnccl.so
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' -lnccl $(LDLIBS)

# (after SHIM_OBJ is set: a rule's prerequisites are expanded where it is read)
ifeq ($(CUDA),1)
$(BUILD)/tests/test_nccl_shim_emu: $(BUILD)/obj/emu/test_nccl_shim.o $(BUILD)/obj/emu/emu_cudart.o \
    $(SHIM_OBJ) $(BUILD)/lib/libweft.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_LINK) -o $@ $^ $(LDLIBS)
endif

# probe_hup links the shared library, as an application does (and dlopens it in its
# `lazy` mode): what loads with it, and when, is what an application gets
$(BUILD)/tests/probe_hup: $(BUILD)/obj/tests/probe_hup.o $(BUILD)/lib/libweft.so
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' -lweft $(LDLIBS)

# the shim's point-to-point schedule alone (pure C, no CUDA: every build tests it)
$(BUILD)/obj/tests/test_nccl_p2p.o: CFLAGS := -Inccl $(CFLAGS)
$(BUILD)/tests/test_nccl_p2p: $(BUILD)/obj/tests/test_nccl_p2p.o $(BUILD)/obj/nccl/p2p_plan.o
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS)

# Debian packages the build, the tests and the benchmarks need; installed only if missing.
DEB_PKGS = gcc make pkg-config libhwloc-dev hwloc openmpi-bin libopenmpi-dev iproute2 \
           gnuplot-nox procps python3 mpich libmpich-dev iperf3 \
           libopenblas-dev python3-torch bible-kjv clang libclang-rt-14-dev libucx-dev \
           libibverbs-dev
deps:
	@missing=""; for p in $(DEB_PKGS); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" \
	        || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	    echo "make deps: installing$$missing"; \
	    if [ "$$(id -u)" != 0 ]; then echo "make deps: need root to apt-get install$$missing" >&2; exit 1; fi; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; \
	fi

test: deps
	$(MAKE) all tests
	BUILD=$(BUILD) bash tests/run.sh

# The main job: an all-reduce sweep on two local ranks (nccl-tests format), then GPT-2
# training sharded over them.
RUN_RANKS ?= 2
run: deps
	$(MAKE) all
	$(BUILD)/bin/weftrun -n $(RUN_RANKS) $(BUILD)/bin/all_reduce_perf -b 8 -e 128M -f 2 -w 5 -n 20
	$(MAKE) $(KJV)
	$(RUN_TRAIN)

# The text that `make run` trains on (package bible-kjv), and the few-minute run itself:
# FULL_SHARD (ZeRO-3) on RUN_RANKS local ranks over weft's collectives, 8 sequences per
# rank and step.
$(KJV):
	@mkdir -p $(dir $@)
	bible "Gen1:1-Rev22:21" > $@.tmp && mv $@.tmp $@

RUN_TRAIN = OPENBLAS_NUM_THREADS=1 $(BUILD)/bin/weftrun -n $(RUN_RANKS) $(TRAIN_BIN) \
    --shard full --data $(KJV) --layers 4 --dim 128 \
    --heads 4 --ctx 128 -b 8 -t 128 --steps 700 --lr 2e-3 --warmup 50 --schedule cosine \
    --wd 0.1 --val-every 100 --val-batches 16 --sample 400

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(BUILD)/lib/libweft.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/lib/libweft.so.0 $(DESTDIR)$(PREFIX)/lib/libweft.so.0
	ln -sf libweft.so.0 $(DESTDIR)$(PREFIX)/lib/libweft.so
	install -m 644 include/weft.h $(DESTDIR)$(PREFIX)/include/
ifeq ($(CUDA),1)
	install -m 644 include/weft_cuda.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/lib/libweft_nccl.so $(DESTDIR)$(PREFIX)/lib/libweft_nccl.so
endif
	install -m 755 $(TOOLS) $(PERF_BIN) $(MPI_BIN) $(TRAIN_BIN) $(PLAN_BIN) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' weft.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/weft.pc

# libFuzzer targets (tests/fuzz/fuzz_*.c) against the library built again with clang,
# coverage and ASan/UBSan in $(BUILD)/fuzz; each runs FUZZ_SECS seconds from its seed
# corpus tests/fuzz/corpus_<name>/ (new finds go to $(BUILD)/fuzz/work/, not the tree).
FUZZ_SECS ?= 60
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN  := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/bin/%)
FUZZ_LIB  := $(BUILD)/fuzz/lib/libweft.a
fuzz: deps
	$(MAKE) BUILD=$(BUILD)/fuzz CC=clang OPT=-O1 SAN=fuzzer-no-link,address,undefined \
	    $(FUZZ_LIB)
	$(MAKE) $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do \
	    n=$$(basename $$f); seeds=tests/fuzz/corpus_$${n#fuzz_}; work=$(BUILD)/fuzz/work/$$n; \
	    mkdir -p $$work; echo "make fuzz: $$n for $(FUZZ_SECS) s (seeds: $$seeds)"; \
	    $$f -max_total_time=$(FUZZ_SECS) -max_len=4096 -timeout=10 -print_final_stats=1 \
	        -artifact_prefix=$(BUILD)/fuzz/ $$work $$seeds >$$work.log 2>&1; rc=$$?; \
	    grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==|SUMMARY)" $$work.log; \
	    test $$rc = 0 || { tail -n 30 $$work.log; echo "make fuzz: $$n FAILED (input saved in $(BUILD)/fuzz/)"; exit 1; }; \
	done

$(BUILD)/fuzz/bin/%: tests/fuzz/%.c $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	clang -std=gnu11 -g -O1 -Wall -Wextra -Werror -fsanitize=fuzzer,address,undefined \
	    $(INCS) -o $@ $^ $(HWLOC_LIBS) -lrt -lm -pthread

clean:
	rm -rf $(BUILD)

help:
	@echo "make run | test | all | tests | install PREFIX=... | deps | clean   (SAN=address,undefined)"

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
