"""Build step, named in setup.cfg (``cmdclass``): besides the package, install
``commtrace-autostart.pth`` at the top of site-packages -- a line Python runs at
every interpreter start in the environment, which imports commtrace only when
``COMMTRACE`` is set to a true value (``COMMTRACE=1``: trace any program, e.g.
every rank torchrun or srun starts, without ``commtrace run``; README "Python
API"). Works for a normal install and for ``pip install -e`` (the editable
wheel puts its top level at the same place). Never imported at run time.
"""
import os

from setuptools.command.build_py import build_py

PTH = "commtrace-autostart.pth"
PTH_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capture", PTH)


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            # Editable installs leave the package's own files in place; the wheel's
            # top level (what lands in site-packages) is the install directory.
            target = self.get_finalized_command("install").install_lib
        else:
            target = self.build_lib
        self.copy_file(PTH_SOURCE, os.path.join(target, PTH), preserve_mode=False)
