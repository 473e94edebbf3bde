#!/usr/bin/env bash
# GCC counts a prefetch as having no effect, so it deletes a loop of nothing
# but prefetches (C++ lets a loop without effects go: -ffinite-loops) and a
# call to a function whose only work is prefetching (ipa-pure-const takes it
# for const). Stop 51 found both in the library: moe_forward's warming of
# its workspace had no prefetch left, and bf16_x16z's prefetch of the next
# unit's exceptions was dropped with its helper. This checks the compiled
# library (argument 1) still holds them.
set -euo pipefail
lib=$1
command -v objdump > /dev/null || { echo "objdump (binutils) is needed to read $lib" >&2; exit 1; }
dis=$(mktemp)
trap 'rm -f "$dis"' EXIT
objdump -d --no-show-raw-insn -C "$lib" > "$dis"

# Prefetch instructions (or those of kind $2: prefetcht0, prefetcht1) in
# the functions whose names contain $1 (or, with a |, any of its parts: a
# helper the compiler may or may not inline; a part's pieces joined by &
# must all be in the name).
prefetches() {
  awk -v pats="$1" -v kind="${2:-prefetch}" 'BEGIN { np = split(pats, pat, "|") }
    /^[0-9a-f]+ <.*>:$/ {
      in_f = 0
      for (i = 1; i <= np; ++i) {
        nq = split(pat[i], piece, "&"); all = 1
        for (k = 1; k <= nq; ++k) if (index($0, piece[k]) == 0) all = 0
        if (all) in_f = 1
      }
      next
    }
    in_f && $2 ~ "^" kind { n++ } END { print n + 0 }' "$dis"
}
fails=0
expect_at_least() {  # name pattern, least count, what it is[, instruction]
  local n
  n=$(prefetches "$1" "${4:-prefetch}")
  if ((n < $2)); then
    echo "FAIL: $3: $n prefetch instructions in functions named like '$1', expected at least $2" >&2
    fails=1
  else
    echo "ok: $3 ($n prefetches)"
  fi
}
expect_at_least "tandem::kernels::moe_forward(|warm_workspace(" 1 "the layer warms its workspace"
# One token asking for its stream (CpuPrefetch::kSoftware): the 49 lines of
# the core two units on and of the core three units on (48 from the chunks,
# the header), the next spare; leaving it to the CPU (kHardware): the next
# spare alone.
expect_at_least "(anonymous namespace)::decode_group<true>(tandem::kernels::RowDotParams const&, \
tandem::kernels::avx512bf16::(anonymous namespace)::Coded const&" 99 "bf16_x16z one token"
expect_at_least "(anonymous namespace)::decode_group<false>(tandem::kernels::RowDotParams const&, \
tandem::kernels::avx512bf16::(anonymous namespace)::Coded const&" 1 "bf16_x16z one token, hardware prefetch"
# Three groups streaming: each group's 3 lines a chunk and its next spare,
# and its share of the next step's 3 lines a chunk; the later passes that
# share alone.
expect_at_least "avx512bf16::(anonymous namespace)::z_tile<3, 8, true>" 21 "bf16_x16z tile of three groups"
expect_at_least "avx512bf16::(anonymous namespace)::z_tile<3, 8, false>" 9 "bf16_x16z later passes"
# The tiles on row_dot_x86_tile.h's driver: each row's prefetch 2 KiB ahead
# (Ahead::at), and the later token groups' share of the next tile's rows
# (prefetch_next_rows, prefetcht1). Stop 62 found both dropped: Ahead::at
# taken for a const function, the share's loop of prefetches deleted.
ns2="avx2::(anonymous namespace)::"
expect_at_least "${ns2}pair_dots<2, 4>(" 2 "avx2 BF16 pairs, two rows by four tokens" prefetcht0
expect_at_least "${ns2}tokens<tandem::kernels::${ns2}PairTile, 4>(" 1 "avx2 BF16 pairs, the next tile's rows" prefetcht1
for span in "WideSpan<true>" "WideSpan<false>"; do
  expect_at_least "${ns2}Fp8BlockTile<tandem::kernels::${ns2}${span}&, 2, 4>::run(" 2 \
    "avx2 FP8 widened tiles, two rows by four tokens ($span)" prefetcht0
done
expect_at_least "${ns2}tokens<tandem::kernels::${ns2}Q8_0Tile, 4>(" 4 "avx2 Q8_0 rowmajor tiles" prefetcht0
expect_at_least "avx512bf16::(anonymous namespace)::tokens<tandem::kernels::avx512bf16::(anonymous namespace)::Bf16Tile, 4>(" \
  4 "avx512bf16 BF16 rowmajor tiles" prefetcht0
exit $fails
