"""RemoteMonitor: post each epoch's logs to a server."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import warnings

import numpy as np

from tapeflow.callbacks.callback import Callback


class RemoteMonitor(Callback):
    """At the end of each epoch, POST {"epoch": epoch, **logs} to `root + path`: as a JSON
    body with `send_as_json`, otherwise as a form with the JSON text in the field `field`.
    `headers` are added to the request. An unreachable server gives a warning, not an error.

    >>> RemoteMonitor(root="http://127.0.0.1:9000").url
    'http://127.0.0.1:9000/publish/epoch/end/'
    """

    def __init__(
        self,
        root: str = "http://localhost:9000",
        path: str = "/publish/epoch/end/",
        field: str = "data",
        headers: dict | None = None,
        send_as_json: bool = False,
        timeout: float = 10.0,
    ):
        super().__init__()
        if urllib.parse.urlparse(root + path).scheme not in ("http", "https"):
            raise ValueError(f"RemoteMonitor: root must be an http(s) URL, got {root!r}")
        self.root, self.path, self.field = root, path, field
        self.headers = headers
        self.send_as_json = bool(send_as_json)
        self.timeout = timeout

    @property
    def url(self) -> str:
        return self.root + self.path

    def on_epoch_end(self, epoch, logs=None):
        send = {"epoch": epoch}
        for key, value in (logs or {}).items():
            send[key] = value.item() if isinstance(value, np.ndarray | np.generic) else value
        headers = dict(self.headers or {})
        if self.send_as_json:
            body = json.dumps(send).encode()
            headers.setdefault("Content-Type", "application/json")
        else:
            body = urllib.parse.urlencode({self.field: json.dumps(send)}).encode()
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read()
        except (urllib.error.URLError, OSError):
            warnings.warn(f"RemoteMonitor: could not reach the server at {self.root}", stacklevel=2)
