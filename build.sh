# build.sh SRC FN "flagsA" "flagsB" ["flagsC"]
F="-O3 -std=c++20 -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mavx512vnni -mavx512vbmi -I/work/main -Wno-uninitialized"
g++ $F $3 -DTANDEM_ROW_DOT_NS=va -c $1 -o a.o 2>&1 | grep error
g++ $F $4 -DTANDEM_ROW_DOT_NS=vb -c $1 -o b.o 2>&1 | grep error
g++ $F ${5:-$3} -DTANDEM_ROW_DOT_NS=vc -c $1 -o c.o 2>&1 | grep error
g++ -O2 -std=c++20 -march=native -I/work/main -DFN=$2 kab.cpp a.o b.o c.o -o kab /work/main/build/kernels/cpu/libtandem_kernels_fast.a /work/main/build/kernels/cpu/libtandem_thread_pool.a /work/main/build/kernels/cpu/libtandem_kernels_cpu.a /work/main/build/common/libtandem_core.a -lspdlog -lfmt -lpthread 2>&1 | grep -E "error|undefined" | head
