"""A PEP 517 build backend for snapd-trainer that needs nothing but Python.

pip builds a project in an isolated environment into which it first
installs the backend named in pyproject.toml; with setuptools that needs a
package index. This backend lives in the source tree (``backend-path``) and
uses only the standard library, so ``pip install ./python`` works offline
and inside a fresh venv. It builds the one pure-Python module as a
``py3-none-any`` wheel (and an sdist, and a PEP 660 editable wheel).

The wheel is reproducible: members in a fixed order, timestamps from
SOURCE_DATE_EPOCH (default 1980-01-01), fixed permissions.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

_HERE = os.path.dirname(os.path.abspath(__file__))
_MODULE = "snapd_trainer"
_DIST = "snapd_trainer"


def _project():
    """Name, version, summary and requires-python from pyproject.toml."""
    with open(os.path.join(_HERE, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not section:
        raise RuntimeError("pyproject.toml: no [project] table")
    body = section.group(1)

    def field(key):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % re.escape(key), body, re.M)
        if not m:
            raise RuntimeError("pyproject.toml: [project] has no %s" % key)
        return m.group(1)

    return {
        "name": field("name"),
        "version": field("version"),
        "summary": field("description"),
        "requires_python": field("requires-python"),
    }


def _epoch():
    try:
        return max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)
    except ValueError:
        return 315532800


def _metadata(p):
    with open(os.path.join(_HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (
        "Metadata-Version: 2.1\n"
        "Name: %s\n"
        "Version: %s\n"
        "Summary: %s\n"
        "Requires-Python: %s\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Description-Content-Type: text/markdown\n"
        "\n%s" % (p["name"], p["version"], p["summary"], p["requires_python"], readme)
    ).encode("utf-8")


def _wheel_file():
    return (
        "Wheel-Version: 1.0\n"
        "Generator: snapd-trainer _snapd_build\n"
        "Root-Is-Purelib: true\n"
        "Tag: py3-none-any\n"
    ).encode("ascii")


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return "%s,sha256=%s,%d\n" % (name, digest, len(data))


def _write_wheel(directory, files):
    """Write files (a list of (archive name, bytes)) plus RECORD as a wheel."""
    p = _project()
    distinfo = "%s-%s.dist-info" % (_DIST, p["version"])
    files = list(files) + [
        (distinfo + "/METADATA", _metadata(p)),
        (distinfo + "/WHEEL", _wheel_file()),
    ]
    record = "".join(_record_line(n, d) for n, d in files) + distinfo + "/RECORD,,\n"
    files.append((distinfo + "/RECORD", record.encode("utf-8")))
    name = "%s-%s-py3-none-any.whl" % (_DIST, p["version"])
    stamp = time.gmtime(_epoch())[:6]
    tmp = os.path.join(directory, name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files:
            info = zipfile.ZipInfo(arcname, date_time=stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, os.path.join(directory, name))
    return name


def _module_source():
    with open(os.path.join(_HERE, _MODULE + ".py"), "rb") as f:
        return f.read()


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(_MODULE + ".py", _module_source())])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # PEP 660: a .pth file puts the source directory on sys.path.
    return _write_wheel(wheel_directory, [("_%s_editable.pth" % _DIST, (_HERE + "\n").encode("utf-8"))])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = "%s-%s" % (_DIST, p["version"])
    name = base + ".tar.gz"
    epoch = _epoch()
    tmp = os.path.join(sdist_directory, name + ".tmp")
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        members = [("PKG-INFO", _metadata(p))]
        for n in ("pyproject.toml", "README.md", "_snapd_build.py", _MODULE + ".py"):
            with open(os.path.join(_HERE, n), "rb") as f:
                members.append((n, f.read()))
        for n, data in members:
            info = tarfile.TarInfo(base + "/" + n)
            info.size, info.mtime, info.mode = len(data), epoch, 0o644
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, os.path.join(sdist_directory, name))
    return name
