"""Builds the Gradio app from lab/ui and launches it, with the background job worker beside it.

Honours GRADIO_SERVER_PORT (default 7860), GRADIO_SERVER_NAME (default 127.0.0.1), LAB_STORE,
LAB_DATA_DIR, LAB_WORKER_SLOTS (jobs run at once, default 1: queued jobs run one after another),
LAB_WORKER_NPROC (processes per job under torchrun, e.g. the number of GPUs; default 1) and
LAB_WORKER=0 to run without starting a worker (e.g. one runs on a GPU machine sharing the store).
"""
import atexit
import os
import subprocess
import sys

from lab.ui import build_app, launch_kwargs


def start_worker():
    if os.environ.get("LAB_WORKER", "1") == "0":
        return None
    proc = subprocess.Popen([sys.executable, "-m", "lab", "worker",
                             "--slots", os.environ.get("LAB_WORKER_SLOTS", "1"),
                             "--nproc", os.environ.get("LAB_WORKER_NPROC", "1")])
    atexit.register(proc.terminate)
    return proc


if __name__ == "__main__":
    start_worker()
    demo = build_app(store=os.environ.get("LAB_STORE"), data_dir=os.environ.get("LAB_DATA_DIR"))
    demo.queue(default_concurrency_limit=4).launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        **launch_kwargs())
