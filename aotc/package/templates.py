"""The runtime sources and the `@KEY@` templates in runtime_c/, filled in for one bundle."""

from __future__ import annotations

import re
from pathlib import Path

from aotc import __version__
from aotc.package.program import Program
from aotc.package.weights import weights_source

RUNTIME_DIR = Path(__file__).resolve().parents[2] / "runtime_c"
# Copied verbatim into every bundle.
RUNTIME_FILES = ("aotc_api.h", "aotc_runtime.h", "aotc_runtime.c", "aotc_pool.c", "aotc_npy.h", "aotc_npy.c")

_KEY = re.compile(r"@([A-Z_]+)@")


def runtime_dir() -> Path:
    try:  # installed: runtime_c is a package next to aotc
        import runtime_c

        return Path(runtime_c.__file__).resolve().parent
    except ImportError:  # pragma: no cover
        return RUNTIME_DIR


def fill(template: str, values: dict[str, str]) -> str:
    """Replaces every @KEY@; a key without a value is an error (a template/code mismatch)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise KeyError(f"template key @{m.group(1)}@ has no value")
        return values[m.group(1)]

    return _KEY.sub(sub, template)


def _read(name: str) -> str:
    return (runtime_dir() / name).read_text()


def _gpu_api(program: Program | None) -> str | None:
    """"opencl" or "cuda" for a GPU program's bundle, None for a CPU one."""
    return None if program is None or program.gpu is None else program.gpu.dialect


def gpu_runtime_files(api: str) -> tuple[str, ...]:
    """The runtime files a GPU bundle adds: the launch tables' header, the code both APIs
    share, and the API's host code."""
    return ("aotc_gpu.h", "aotc_gpu.c", f"aotc_{api}.c")


def runtime_sources(program: Program | None = None) -> dict[str, bytes]:
    api = _gpu_api(program)
    names = RUNTIME_FILES + (gpu_runtime_files(api) if api else ())
    return {name: (runtime_dir() / name).read_bytes() for name in names}


# The folder the bundle's README tells CMake to build in (`cmake -S . -B build`).
CMAKE_BUILD_DIR = "build"


def _gpu_objects(name: str, api: str) -> list[str]:
    return ["aotc_gpu.o", f"aotc_{api}.o", f"{name}_kernel_code.o"]


def make_products(name: str, gpu_api: str | None = None) -> list[str]:
    """Every file the bundle's Makefile makes (what `make clean` removes)."""
    return [f"{name}.o", f"{name}_linked.o", "aotc_runtime.o", "aotc_pool.o",
            f"{name}_weights.o", *(_gpu_objects(name, gpu_api) if gpu_api else []),
            "run_model.o", "aotc_npy.o", f"lib{name}.a", f"lib{name}.so", "run_model"]


def built_files(name: str, gpu_api: str | None = None) -> list[str]:
    """What building a bundle adds to its folder (with make or the README's CMake command)."""
    return [*make_products(name, gpu_api), CMAKE_BUILD_DIR]


# What the device's libraries need in a GPU bundle's Makefile, per API.
_MAKE_GPU = {
    "opencl": {
        "GPU_USAGE": ("#   make OPENCL_CFLAGS=-I/opt/ocl/include OPENCL_LIBS='-L/opt/ocl/lib -lOpenCL'"
                      "   OpenCL elsewhere\n"),
        "GPU_VARS": "OPENCL_CFLAGS ?=\nOPENCL_LIBS ?= -lOpenCL\n",
        "GPU_CFLAGS": " $(OPENCL_CFLAGS)",
        "GPU_LIBS": "$(OPENCL_LIBS) ",
        "GPU_PHONY": "",
        "GPU_RULES": "",
    },
    "cuda": {
        "GPU_USAGE": ("#   make CUDA_PATH=/opt/cuda                       the CUDA toolkit elsewhere "
                      "(cuda.h; libcuda.so\n"
                      "#                                             from its lib64/stubs: the "
                      "driver's at run time)\n"
                      "#   make ptx CUDA_ARCH=sm_80                     rebuild the PTX from "
                      "@NAME@_kernels.cu, then make\n"),
        "GPU_VARS": ("CUDA_PATH ?= /usr/local/cuda\nCUDA_CFLAGS ?= -I$(CUDA_PATH)/include\n"
                     "CUDA_LIBS ?= -L$(CUDA_PATH)/lib64/stubs -lcuda\n"
                     "NVCC ?= $(CUDA_PATH)/bin/nvcc\nCUDA_ARCH ?= @CUDA_ARCH@\n"),
        "GPU_CFLAGS": " $(CUDA_CFLAGS)",
        "GPU_LIBS": "$(CUDA_LIBS) ",
        "GPU_PHONY": " ptx",
        "GPU_RULES": """
# The PTX for another architecture (nvcc), embedded into @NAME@_kernel_code.c as a C array.
ptx:
\t$(NVCC) -ptx -arch=$(CUDA_ARCH) -O3 -o @NAME@_kernels.ptx @NAME@_kernels.cu
\t{ echo '/* @NAME@_kernels.ptx ($(CUDA_ARCH)) as a C array, written by make ptx */'; \\
\t  echo '#include "aotc_gpu.h"'; \\
\t  echo 'extern const char @NAME@_kernel_target[] AOTC_INTERNAL;'; \\
\t  echo 'const char @NAME@_kernel_target[] AOTC_INTERNAL = "cuda $(CUDA_ARCH)";'; \\
\t  echo 'extern const unsigned char @NAME@_kernel_code[] AOTC_INTERNAL;'; \\
\t  echo 'const unsigned char @NAME@_kernel_code[] AOTC_INTERNAL = {'; \\
\t  od -An -v -tu1 @NAME@_kernels.ptx | sed 's/[0-9][0-9]*/&,/g'; \\
\t  echo '0};'; } > @NAME@_kernel_code.c
""",
    },
}


def render_makefile(program: Program, weights_format: str) -> str:
    n, api = program.name, _gpu_api(program)
    deps = f"{n}_weights.S {n}_weights.bin" if weights_format == "incbin" else f"{n}_weights.c"
    values = {"NAME": n, "WEIGHTS_DEPS": deps, "CUDA_ARCH": program.cpu,
              "MAKE_PRODUCTS": " ".join(make_products(n, api))}
    if api is None:
        values |= {k: "" for k in _MAKE_GPU["opencl"]}
        values |= {"GPU_HEADERS": "", "GPU_OBJS": "", "KERNEL_OBJS": f" {n}_kernels.o"}
    else:
        values |= {k: fill(v, values) for k, v in _MAKE_GPU[api].items()}
        values |= {"GPU_HEADERS": " aotc_gpu.h", "KERNEL_OBJS": "",
                   "GPU_OBJS": "".join(f" {o}" for o in _gpu_objects(n, api))}
    return fill(_read("Makefile.in"), values)


def render_cmake(program: Program, weights_format: str) -> str:
    n = program.name
    if weights_format == "incbin":
        props = (
            f"set_source_files_properties({n}_weights.S PROPERTIES\n"
            f'    COMPILE_OPTIONS "-Wa,-I${{CMAKE_CURRENT_SOURCE_DIR}}"\n'
            f'    OBJECT_DEPENDS "${{CMAKE_CURRENT_SOURCE_DIR}}/{n}_weights.bin")'
        )
        run_model = ("# run_model reads the weights from the bundle's folder (not from its own)\n"
                     "target_compile_definitions(run_model PRIVATE\n"
                     '    RUN_MODEL_WEIGHTS_DIR="${CMAKE_CURRENT_SOURCE_DIR}")')
        languages = "C ASM"
    else:
        props, run_model, languages = "", "", "C"
    api = _gpu_api(program)
    if api is None:
        gpu = {"CMAKE_MINIMUM": "3.13", "GPU_FIND": "", "GPU_LINK": "",
               "KERNEL_PROPERTIES": (f"set_source_files_properties({n}_kernels.o PROPERTIES "
                                     "EXTERNAL_OBJECT TRUE GENERATED FALSE)\n"),
               "KERNEL_SRCS": f"{n}_kernels.o"}
    else:  # FindOpenCL's OpenCL::OpenCL (3.7), FindCUDAToolkit's CUDA::cuda_driver (3.17)
        gpu = {"CMAKE_MINIMUM": "3.13" if api == "opencl" else "3.17",
               "GPU_FIND": ("find_package(OpenCL REQUIRED)" if api == "opencl" else
                            "find_package(CUDAToolkit REQUIRED)\n"
                            "if(NOT TARGET CUDA::cuda_driver)\n"
                            '  message(FATAL_ERROR "libcuda not found: the NVIDIA driver\'s, or '
                            'the CUDA toolkit\'s lib64/stubs/libcuda.so")\n'
                            "endif()"),
               "GPU_LINK": " OpenCL::OpenCL" if api == "opencl" else " CUDA::cuda_driver",
               "KERNEL_PROPERTIES": "",
               "KERNEL_SRCS": f"aotc_gpu.c aotc_{api}.c {n}_kernel_code.c"}
    return fill(
        _read("CMakeLists.txt.in"),
        {"NAME": n, "LANGUAGES": languages, "WEIGHTS_PROPERTIES": props,
         "RUN_MODEL_PROPERTIES": run_model,
         "WEIGHTS_SRC": weights_source(n, weights_format), **gpu},
    )


def render_run_model(program: Program, weights_format: str) -> str:
    """run_model.c: with the weights in a .bin (incbin), it reads that file at run time and so
    links no copy of them; with a C array it uses the linked-in weights."""
    linked = weights_format != "incbin"
    return fill(_read("run_model.c.in"), {
        "NAME": program.name, "NAME_UPPER": program.name.upper(),
        "WEIGHTS_FILE": "" if linked else f"{program.name}_weights.bin",
        "LINKED_WEIGHTS": "1" if linked else "0"})


def _example(program: Program) -> str:
    n, up = program.name, program.name.upper()
    ins = ", ".join(f"calloc(1, {up}_INPUT_{i}_SIZE)" for i in range(len(program.inputs)))
    outs = ", ".join(f"malloc({up}_OUTPUT_{i}_SIZE)" for i in range(len(program.outputs)))
    ins, outs = ins or "NULL", outs or "NULL"
    return "\n".join(
        [
            "#include <stdio.h>",
            "#include <stdlib.h>",
            f'#include "{n}.h"',
            "",
            "int main(void) {",
            f"    const void *inputs[{up}_NUM_INPUTS + 1] = {{{ins}}};  /* fill them */",
            f"    void *outputs[{up}_NUM_OUTPUTS + 1] = {{{outs}}};",
            f"    {n}_context *ctx = NULL;",
            f"    int rc = {n}_create(&ctx, 0);  /* 0: default thread count */",
            f"    if (rc == AOTC_OK) rc = {n}_run_context(ctx, inputs, outputs);",
            f'    if (rc != AOTC_OK) fprintf(stderr, "{n}: %s\\n", {n}_status_message(rc));',
            f"    {n}_destroy(ctx);",
            "    /* ... use outputs, then free the buffers ... */",
            "    return rc == AOTC_OK ? 0 : 1;",
            "}",
        ]
    )


def _io_rows(program: Program) -> str:
    rows = []
    for kind, tensors in (("input", program.inputs), ("output", program.outputs)):
        for i, t in enumerate(tensors):
            dims = "×".join(str(d) for d in t.shape) or "scalar"
            name = t.name.replace("|", "\\|")
            rows.append(f"| {kind} {i} | `{name}` | {t.dtype} | {dims} | {t.nbytes} |")
    return "\n".join(rows)


def _run_args(program: Program) -> str:
    return " ".join(
        [*(f"{t.name}.npy" for t in program.inputs), *(f"OUT_{t.name}.npy" for t in program.outputs)]
    )


# What a GPU bundle's README says per API.
_README_GPU = {
    "opencl": {
        "API_NAME": "OpenCL", "NEEDS": ("the OpenCL headers and ICD loader to build "
                                         "(`apt-get install ocl-icd-opencl-dev`) and a device's "
                                         "OpenCL driver to run"),
        "CMAKE_PACKAGE": "`find_package(OpenCL)`", "LINK": "-lOpenCL",
        "BUILD_NOTES": ("The Makefile takes `OPENCL_CFLAGS=-I...` and `OPENCL_LIBS='-L... "
                        "-lOpenCL'` for an OpenCL installed elsewhere. The kernels' OpenCL C "
                        "source is `@NAME@_kernels.cl`, embedded in `@NAME@_kernel_code.c`; the "
                        "device's compiler builds it when a context is created."),
        "DEFAULT_DEVICE": "the first GPU, else the first OpenCL device",
        "DEVICE_ENV": "AOTC_OPENCL_DEVICE",
        "DEVICE_CHOICES": ("a number, the device's index over all platforms; `gpu`, `cpu` or "
                           "`accelerator`, the first of that type; or text found in the "
                           "device's or platform's name, case ignored"),
        "CREATE_WHAT": ("Builds the kernels from their source, creates each kernel once and "
                        "allocates the device's buffers."),
        "CACHE": ("a file for the built program: read when it was built from these kernels "
                  "for this device and driver, else written after the build, atomically; a "
                  "file that cannot be read or written costs only the build"),

        "DEVICE_BUFFERS": ("`cl_mem` buffers made in the context's `cl_context` "
                           "(`@NAME@_context_native`), cast to `void *`; write the inputs "
                           "before the call (enqueued on its queue, or finished)"),
        "NATIVE": "its `cl_context` and `cl_command_queue`",
    },
    "cuda": {
        "API_NAME": "CUDA", "NEEDS": ("`cuda.h` to build (the CUDA toolkit; `CUDA_PATH`, "
                                       "default `/usr/local/cuda`) and the NVIDIA driver's "
                                       "`libcuda` to run; the program links `libcuda` alone"),
        "CMAKE_PACKAGE": "`find_package(CUDAToolkit)`, `CUDA::cuda_driver`",
        "LINK": "-L/usr/local/cuda/lib64/stubs -lcuda",
        "BUILD_NOTES": ("The kernels' CUDA C source is `@NAME@_kernels.cu`, compiled by nvcc to "
                        "`@NAME@_kernels.ptx` (for @ARCH@), which `@NAME@_kernel_code.c` embeds "
                        "and the driver compiles for the device when a context is created. "
                        "`make ptx CUDA_ARCH=sm_80 && make` rebuilds the PTX for another "
                        "architecture (the driver runs PTX on its architecture and newer ones)."),
        "DEFAULT_DEVICE": "device 0",
        "DEVICE_ENV": "AOTC_CUDA_DEVICE",
        "DEVICE_CHOICES": "the device's ordinal",
        "CREATE_WHAT": ("Loads the PTX (`cuModuleLoadDataEx`) into the device's primary context, "
                        "creates one stream and allocates the device's buffers."),
        "CACHE": "OpenCL only; the CUDA driver keeps its own cache of compiled PTX",

        "DEVICE_BUFFERS": ("`CUdeviceptr` values cast to `void *` (`(void *)(uintptr_t)p`), "
                           "allocated on the device in its primary context (`cuMemAlloc` "
                           "there, or `cudaMalloc`); the inputs complete before the call (the "
                           "kernels run on a stream of their own)"),
        "NATIVE": "the device's primary `CUcontext` and the `CUstream` the kernels run on",
    },
}


def _render_gpu_readme(program: Program, api: str) -> str:
    n = program.name
    values = {"NAME": n, "UPPER": n.upper(), "VERSION": __version__, "API": api,
              "TARGET": f"{api} ({program.cpu})", "ARCH": program.cpu,
              "IO_TABLE": _io_rows(program), "WORKSPACE": str(program.arena_size),
              "WEIGHTS_BYTES": str(len(program.weights)), "EXAMPLE": _example(program),
              "RUN_ARGS": _run_args(program)}
    values |= {k: fill(v, values) for k, v in _README_GPU[api].items()}
    return fill(_read("README_gpu.md.in"), values)


def render_readme(program: Program) -> str:
    n = program.name
    api = _gpu_api(program)
    if api is not None:
        return _render_gpu_readme(program, api)
    return fill(
        _read("README.md.in"),
        {
            "NAME": n,
            "UPPER": n.upper(),
            "VERSION": __version__,
            "TRIPLE": program.triple,
            "CPU": program.cpu,
            "FEATURES": ", ".join(program.cpu_features) or "baseline only",
            "IO_TABLE": _io_rows(program),
            "WORKSPACE": str(program.arena_size),
            "WEIGHTS_BYTES": str(len(program.weights)),
            "THREADS": (f"{program.num_threads} (fixed at compile time)" if program.num_threads
                        else "all online cores"),
            "EXAMPLE": _example(program),
            "RUN_ARGS": _run_args(program),
        },
    )
