"""The shipped data as a package: this folder is installed as `specdecsim_data` (setup.py), so an
install found anywhere reads it through importlib.resources (simulator.profile.data_dir). No code."""
