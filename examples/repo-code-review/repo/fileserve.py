"""Serve thumbnails of the files in one folder (a small web helper)."""
import os
import subprocess

ROOT = "/srv/files"


def resolve(name):
    """The path of file NAME inside ROOT; refuses names outside it."""
    path = os.path.join(ROOT, name)
    if not path.startswith(ROOT):
        raise ValueError("outside the root: %r" % name)
    return path


def thumbnail(name):
    """Make a 64x64 thumbnail of NAME and return its path."""
    src = resolve(name)
    subprocess.run("convert %s -resize 64x64 /tmp/thumb.png" % src, shell=True, check=True)
    return "/tmp/thumb.png"
