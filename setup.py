"""The packages of the wheel; everything else is in pyproject.toml.

`specdecsim_data` is the data/ folder (the shipped profiles, engine profiles, hardware catalog,
cases, model configs, fits, measurements; its subfolders listed as namespace packages, as setuptools
wants for data folders) and `specdecsim_data.scenarios` the scenarios/ folder, so an install outside
a checkout finds them through importlib.resources (simulator.profile.data_dir, scenarios_dir).
pyproject.toml cannot add a mapped package to the ones `find` discovers, hence this file. Which files
go: pyproject.toml's package-data. The raw points, live records and traces stay in the checkout.
"""

from setuptools import find_namespace_packages, find_packages, setup

CHECKOUT_ONLY = ["engine_runs*", "live*", "points*", "traces*"]  # data/ folders a wheel leaves out

setup(
    packages=(find_packages(include=["simulator*", "calibration*"]) + ["specdecsim_data", "specdecsim_data.scenarios"]
              + [f"specdecsim_data.{p}" for p in find_namespace_packages(where="data", exclude=CHECKOUT_ONLY)]),
    package_dir={"specdecsim_data": "data", "specdecsim_data.scenarios": "scenarios"},
)
