"""Packaging: metadata in setup.cfg. This file only adds ``commtrace-autostart.pth``
to what is installed: a line that Python runs at every interpreter start in the
environment, which imports commtrace only when ``COMMTRACE`` is set to a true
value (``COMMTRACE=1``: trace any program, e.g. every rank torchrun or srun
starts, without ``commtrace run``; see README "Python API"). Installed by a
normal install (at the top of site-packages) and by ``pip install -e`` (into
the editable wheel, which puts it at the same place).
"""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "commtrace-autostart.pth"
PTH_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "commtrace", "capture", PTH)


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            # Editable installs put the package's own files elsewhere; the wheel's
            # top level (what lands in site-packages) is the install directory.
            target = self.get_finalized_command("install").install_lib
        else:
            target = self.build_lib
        self.copy_file(PTH_SOURCE, os.path.join(target, PTH), preserve_mode=False)


setup(cmdclass={"build_py": BuildPyWithPth})
