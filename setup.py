"""Everything about the build is in pyproject.toml except one step: the wheel ships the repository's top-level
``conf/`` (Hydra's config groups, YAML only) as ``selectrust/conf/``, where :mod:`selectrust.core.conf_dir` finds it
once installed. The repository keeps ``conf/`` at the top; an editable install reads it there."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithConf(build_py):
    """``build_py`` plus ``conf/**/*.yaml`` copied to ``<build_lib>/selectrust/conf/`` (not in editable mode)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for src in sorted((ROOT / "conf").rglob("*.yaml")):
            dest = Path(self.build_lib) / "selectrust" / "conf" / src.relative_to(ROOT / "conf")
            self.mkpath(str(dest.parent))
            self.copy_file(str(src), str(dest))


setup(cmdclass={"build_py": BuildPyWithConf})
