"""One session speaking Streamlit's websocket protocol (the protobuf BackMsg / ForwardMsg messages a
browser sends and receives), and the widget states it sends."""

from __future__ import annotations

import asyncio
from typing import Any

# --- one session speaking Streamlit's protocol ----------------------------------------------------


class RunResult:
    """What one script run sent: its elements in order, and how it ended."""

    def __init__(self) -> None:
        self.elements: list[tuple[str, Any]] = []
        self.status: int | None = None
        self.fragment = False  # a fragment's own run (its elements only), not the whole script's
        self.auto_reruns: dict[str, float] = {}  # fragment id -> seconds: fragments that asked to be polled

    def of_type(self, kind: str) -> list[Any]:
        return [element for name, element in self.elements if name == kind]

    def texts(self) -> list[str]:
        texts = []
        for name, element in self.elements:
            if name in ("markdown", "heading", "alert", "text"):
                texts.append(getattr(element, "body", ""))
            elif name == "progress":
                texts.append(element.text)
        return texts


class Session:
    """One student's connection. With `fragment_moves` (the default) a widget change inside an `st.fragment`
    is sent as the browser sends it: a run of that fragment alone (the Pruning page's body), not of the page;
    False sends every change as a run of the whole page (the load tests' protocol before 2026-11-28)."""

    def __init__(self, index: int, url: str, run_id: str | None, timeout: float = 120.0, fragment_moves: bool = True):
        self.index = index
        self.fragment_moves = fragment_moves
        self.widget_fragments: dict[str, str] = {}  # widget id -> the fragment its element was drawn in ("": none)
        self.fragment_last: RunResult | None = None  # a fragment move's run since the last full run
        self.ws_url = url.replace("http://", "ws://") + "/_stcore/stream"
        self.run_id = run_id
        self.timeout = timeout
        self.pages: dict[str, str] = {}  # page name -> script hash
        self.page = ""
        self.server_session: str | None = None  # the server's session id (new_session message)
        self.widgets: dict[str, Any] = {}  # widget id -> WidgetState (what the browser would resend)
        self.auto_reruns: dict[str, float] = {}  # the fragments the last full run asked the browser to poll
        self.last: RunResult | None = None
        self._ws = None
        self._reader: asyncio.Task | None = None
        self._current: RunResult | None = None
        self._finished: asyncio.Future | None = None
        self._awaiting_fragment = False

    async def connect(self) -> None:
        import websockets

        self._ws = await websockets.connect(
            self.ws_url, subprotocols=["streamlit"], max_size=None, open_timeout=self.timeout, ping_interval=None
        )
        self._reader = asyncio.create_task(self._read())
        self._reader.add_done_callback(self._reader_ended)

    def _reader_ended(self, task: asyncio.Task) -> None:
        """A dropped connection or an unreadable message fails the interaction waiting for it."""
        if task.cancelled():
            return
        error = task.exception() or ConnectionError("the server closed the connection")
        if self._finished is not None and not self._finished.done():
            self._finished.set_exception(error)

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()

    async def _read(self) -> None:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        async for data in self._ws:
            msg = ForwardMsg()
            msg.ParseFromString(data)
            kind = msg.WhichOneof("type")
            if kind == "new_session":
                self._current = RunResult()
                self.server_session = msg.new_session.initialize.session_id or self.server_session
            elif kind == "navigation":
                self.pages = {page.page_name: page.page_script_hash for page in msg.navigation.app_pages}
                current = [
                    p.page_name
                    for p in msg.navigation.app_pages
                    if p.page_script_hash == msg.navigation.page_script_hash
                ]
                self.page = current[0] if current else self.page
            elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element" and self._current is not None:
                element = msg.delta.new_element
                name = element.WhichOneof("type")
                if name is not None:
                    value = getattr(element, name)
                    self._current.elements.append((name, value))
                    widget_id = getattr(value, "id", "")
                    if isinstance(widget_id, str) and widget_id:
                        self.widget_fragments[widget_id] = msg.delta.fragment_id
            elif kind == "auto_rerun" and self._current is not None:
                self._current.auto_reruns[msg.auto_rerun.fragment_id] = msg.auto_rerun.interval
            elif kind == "stop_auto_rerun":
                for fragment_id in msg.stop_auto_rerun.fragment_ids:
                    self.auto_reruns.pop(fragment_id, None)
            elif kind == "script_finished":
                # A run the app itself cut short with st.rerun() (the next one follows at once): wait for
                # the run that finishes. A fragment's own run ends a fragment poll (poll_fragments) or a move of a
                # widget inside the fragment, and is passed over by a full rerun's wait.
                if msg.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    continue
                fragment = msg.script_finished == ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY
                if fragment and not self._awaiting_fragment:
                    continue
                if self._current is not None:
                    self._current.status = 0 if fragment else msg.script_finished
                    self._current.fragment = fragment
                    if fragment:
                        self.auto_reruns.update(self._current.auto_reruns)
                    else:
                        self.auto_reruns = dict(self._current.auto_reruns)
                if self._finished is not None and not self._finished.done():
                    self._finished.set_result(self._current)

    async def poll_fragments(self, due: list[str] | None = None) -> list[RunResult]:
        """What the browser does on an `st.fragment(run_every=...)` timer: rerun each polled fragment (only
        those in `due`, when given; one after the other) and wait for it; a fragment that reruns the
        whole script (st.rerun) ends with that full run's result."""
        results = []
        for fragment_id in [f for f in self.auto_reruns if due is None or f in due]:
            result = await self.rerun(fragment_id=fragment_id)
            results.append(result)
            if not result.fragment:
                break  # a full run: its fragments are the ones to poll now
        return results

    async def rerun(
        self, page: str | None = None, changes: dict[str, Any] | None = None, fragment_id: str | None = None
    ) -> RunResult:
        """Rerun the script (on `page`, with widget `changes` by id), or only fragment `fragment_id` (a
        timer's poll), and wait for it to finish. Changes of widgets drawn in one fragment rerun that
        fragment, as a browser does (unless fragment_moves is off)."""
        from streamlit.proto.BackMsg_pb2 import BackMsg

        states = dict(self.widgets)
        states.update(changes or {})
        msg = BackMsg()
        client = msg.rerun_script
        client.SetInParent()  # an empty ClientState must still make this a rerun request
        if self.run_id:
            client.query_string = f"run={self.run_id}"
        if page is not None:
            client.page_script_hash = self.pages.get(page, "")
            client.page_name = page
        elif self.page and self.page in self.pages:
            client.page_script_hash = self.pages[self.page]
        for state in states.values():
            if not state.HasField("trigger_value"):
                client.widget_states.widgets.append(state)
        for state in (changes or {}).values():
            if state.HasField("trigger_value"):
                client.widget_states.widgets.append(state)
        moved = self.moved_fragment(page, changes) if fragment_id is None else None
        if fragment_id is not None:
            client.fragment_id = fragment_id
            client.is_auto_rerun = True
        elif moved is not None:
            client.fragment_id = moved
        self._awaiting_fragment = fragment_id is not None or moved is not None
        self._finished = asyncio.get_running_loop().create_future()
        await self._ws.send(msg.SerializeToString())
        try:
            result = await asyncio.wait_for(self._finished, self.timeout)
        finally:
            self._awaiting_fragment = False
        if not result.fragment:
            self.last = result
            self.fragment_last = None
            self._remember_widgets(result)
        elif moved is not None:
            self.fragment_last = result
            self._remember_widgets(result)
        return result

    def moved_fragment(self, page: str | None, changes: dict[str, Any] | None) -> str | None:
        """The fragment a change reruns: the one every changed widget was drawn in, when there is one and
        the page stays; None (a run of the whole page) otherwise."""
        if not self.fragment_moves or page is not None or not changes:
            return None
        owners = {self.widget_fragments.get(widget_id, "") for widget_id in changes}
        return owners.pop() if len(owners) == 1 and "" not in owners else None

    def _remember_widgets(self, result: RunResult) -> None:
        """Keep the value widgets show, as the browser keeps its widget states."""
        for name, element in result.elements:
            if name == "slider":
                self.widgets[element.id] = slider_state(element.id, list(element.value))

    def find(self, kind: str, label_start: str) -> Any:
        """The newest drawn widget of this kind and label: a fragment move's run redraws its fragment's."""
        assert self.last is not None
        for result in (self.fragment_last, self.last):
            for element in result.of_type(kind) if result is not None else ():
                if element.label.startswith(label_start):
                    return element
        return None


def slider_state(widget_id: str, values: list[float]) -> Any:
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    state = WidgetState(id=widget_id)
    state.double_array_value.data.extend(values)
    return state


def number_state(widget_id: str, value: int) -> Any:
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    return WidgetState(id=widget_id, int_value=int(value))


def text_state(widget_id: str, value: str) -> Any:
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    return WidgetState(id=widget_id, string_value=value)


def trigger_state(widget_id: str) -> Any:
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    return WidgetState(id=widget_id, trigger_value=True)
