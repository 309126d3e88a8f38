"""The generated C function that tells which of the kernels' CPU features the running CPU lacks."""

from __future__ import annotations

# Names __builtin_cpu_supports accepts in every gcc >= 9 and clang >= 10 (LLVM spelling = gcc's).
X86_CHECKABLE = (
    "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi", "bmi2", "aes",
    "pclmul", "avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512cd", "avx512ifma",
    "avx512vbmi", "avx512vbmi2", "avx512vnni", "avx512bitalg", "avx512vpopcntdq", "gfni",
    "vpclmulqdq",
)

# Features that older compilers' __builtin_cpu_supports does not know, read from CPUID leaf 7
# (subleaf, register, bit) instead: LLVM uses them where the host has them (AVX512-FP16's half
# arithmetic, for one), and a kernel that does faults on a CPU without them. The OS's support
# of the 512-bit state they need is what avx512f's test, before them, checks.
X86_CPUID = {
    "avx512bf16": (1, "eax", 5),
    "avx512fp16": (0, "edx", 23),
}

# AArch64 features beyond the NEON baseline: (auxv key, bit) from <asm/hwcap.h>.
AARCH64_HWCAP = {
    "fullfp16": ("AT_HWCAP", 10),  # HWCAP_ASIMDHP
    "dotprod": ("AT_HWCAP", 20),  # HWCAP_ASIMDDP
    "sve": ("AT_HWCAP", 22),  # HWCAP_SVE
    "sve2": ("AT_HWCAP2", 1),  # HWCAP2_SVE2
    "i8mm": ("AT_HWCAP2", 13),  # HWCAP2_I8MM
    "bf16": ("AT_HWCAP2", 14),  # HWCAP2_BF16
}
AARCH64_BASELINE = ("neon", "fp-armv8", "v8a")


def normalize(features: list[str]) -> list[str]:
    """'+avx2' and 'avx2' are the same; '-x' entries (disabled features) are dropped."""
    out: list[str] = []
    for f in features:
        f = f.strip()
        if not f or f.startswith("-"):
            continue
        f = f.lstrip("+")
        if f not in out:
            out.append(f)
    return out


def is_x86(triple: str) -> bool:
    return triple.startswith(("x86_64", "amd64"))


def is_aarch64(triple: str) -> bool:
    return triple.startswith(("aarch64", "arm64"))


def unchecked(triple: str, features: list[str]) -> list[str]:
    """Features the generated check cannot test at run time (reported in comments)."""
    feats = normalize(features)
    if is_x86(triple):
        return [f for f in feats if f not in X86_CHECKABLE and f not in X86_CPUID]
    if is_aarch64(triple):
        return [f for f in feats if f not in AARCH64_HWCAP and f not in AARCH64_BASELINE]
    return feats


def arch_guard(triple: str) -> str:
    """A preprocessor check that the bundle is compiled for the kernels' architecture."""
    if is_x86(triple):
        macro = "__x86_64__"
    elif is_aarch64(triple):
        macro = "__aarch64__"
    else:
        return f"/* target {triple}: no architecture check */"
    return (
        f"#if !defined({macro})\n"
        f'#error "this bundle\'s kernels are compiled for {triple}: build it with a compiler '
        f'for that target (e.g. make CC=...)"\n'
        f"#endif"
    )


def cpu_check_function(fn_name: str, triple: str, features: list[str]) -> str:
    """C source of `static const char *fn_name(void)`: NULL when every checkable feature is
    present, else the name of the first one missing."""
    feats = normalize(features)
    lines = [f"static const char *{fn_name}(void) {{"]
    skipped = unchecked(triple, feats)
    if skipped:
        lines.append(f"    /* not checkable at run time: {', '.join(skipped)} */")
    x86 = [f for f in feats if f in X86_CHECKABLE] if is_x86(triple) else []
    arm = [f for f in feats if f in AARCH64_HWCAP] if is_aarch64(triple) else []
    cpuid = [f for f in feats if f in X86_CPUID] if is_x86(triple) else []
    if x86 or cpuid:
        lines.append("#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))")
        lines.append("    __builtin_cpu_init();")
        for f in x86:
            lines.append(f'    if (!__builtin_cpu_supports("{f}")) return "{f}";')
        for f in cpuid:
            sub, reg, bit = X86_CPUID[f]
            lines.append("    {")
            lines.append("        unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;")
            lines.append(f"        if (!__get_cpuid_count(7, {sub}, &eax, &ebx, &ecx, &edx) || "
                         f"!({reg} & (1u << {bit})))")
            lines.append(f'            return "{f}";')
            lines.append("    }")
        lines.append("#endif")
    if arm:
        lines.append("#if defined(__aarch64__) && defined(__linux__)")
        for f in arm:
            key, bit = AARCH64_HWCAP[f]
            lines.append(f'    if (!(getauxval({key}) & (1UL << {bit}))) return "{f}";')
        lines.append("#endif")
    lines.append("    return NULL;")
    lines.append("}")
    return "\n".join(lines)


def needs_cpuid(triple: str, features: list[str]) -> bool:
    return is_x86(triple) and any(f in X86_CPUID for f in normalize(features))


def needs_auxv(triple: str, features: list[str]) -> bool:
    return is_aarch64(triple) and any(f in AARCH64_HWCAP for f in normalize(features))
