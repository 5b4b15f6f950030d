# lit configuration: compiler tests as IR text in, text out, checked by FileCheck.
import os
import shutil

import lit.formats

config.name = "tilefuse"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".tir"]
config.test_source_root = os.path.dirname(__file__)

build = os.environ.get("TILEFUSE_BUILD_DIR", os.path.join(config.test_source_root, "..", "..", "build"))
config.test_exec_root = os.path.join(os.path.abspath(build), "lit")
tools = [os.path.abspath(os.path.join(build, "compiler")), "/usr/lib/llvm-19/bin"]
config.environment["PATH"] = os.pathsep.join(tools + [os.environ.get("PATH", "")])
for tool in ("tilefuse-opt", "FileCheck", "not"):
    if shutil.which(tool, path=config.environment["PATH"]) is None:
        lit_config.fatal(f"lit tests need '{tool}' on PATH (searched {tools})")
