"""deploy/kmpc_deploy.py (the administrator's tool, a script in deploy/, not
a package) loaded as the module kmpc_deploy, so that the emulated hosts run
exactly what deploy/THREE-HOSTS.md installs."""
import importlib.util
import os

from kmpc_harness.realm import ROOT

PATH = os.path.join(ROOT, "deploy", "kmpc_deploy.py")
_spec = importlib.util.spec_from_file_location("kmpc_deploy", PATH)
kmpc_deploy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kmpc_deploy)
