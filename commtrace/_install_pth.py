"""Build step (setup.cfg ``cmdclass``): also install ``commtrace-autostart.pth`` at the top of
site-packages, run at every interpreter start, importing commtrace only when ``COMMTRACE``
is true (README "Python API"). Normal and editable installs; never imported at run time.
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
