"""What both vendor adapters share: one call through the retry loop, the streamed answer
read into a Completion, and every SDK failure as a classified ProviderError.

A wire format (openai_compat.py, anthropic.py) says only how its request is built and
sent, and how its events, or a whole JSON body, fold into its own assembly."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar, Generic, TypeVar

import httpx2

from swarmdeck.errors import ProviderError
from swarmdeck.models import errors
from swarmdeck.models.edit_shapes import edit_shape, from_vendor
from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.retry import (
    CallbackError,
    KeyLoader,
    SharedHttpClient,
    TurnCall,
    complete_with_retry,
    http_timeout,
    is_json_answer,
    load_key,
    pooled_client_factory,
    scrub,
)
from swarmdeck.models.types import (
    ChunkCallback,
    Completion,
    DeltaCallback,
    Message,
    NoticeCallback,
    ToolSpec,
)
from swarmdeck.models.window import configured_window, server_window

# What a wire format folds its answer into while it streams.
Assembly = TypeVar("Assembly")


class VendorAdapter(Generic[Assembly]):
    """A ChatModel over one vendor SDK; subclasses give the wire format."""

    # The vendor SDK module (`openai` or `anthropic`): its client, errors and HTTP pool.
    sdk: ClassVar[ModuleType]
    # The SDK's async client class.
    client_class: ClassVar[Any]
    # What a stream that ended without the vendor's last event lacked, for the error.
    unfinished: ClassVar[str]

    def __init__(
        self,
        config: ProviderConfig,
        model_name: str,
        key_loader: KeyLoader,
        limiter: ProviderLimiter,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        self.config = config
        self.model_name = model_name
        self._key_loader = key_loader
        self._limiter = limiter
        self._http = SharedHttpClient(http_client, pooled_client_factory(self.sdk))

    # Alike on purpose with types.ChatModel: the protocol says what the runtime needs,
    # this is its one implementation.
    async def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        on_delta: DeltaCallback | None = None,
        on_chunk: ChunkCallback | None = None,
        on_notice: NoticeCallback | None = None,
    ) -> Completion:
        """Send the conversation, return the model's turn. Raises ProviderError."""
        return await self._turn(TurnCall(messages, tools, on_delta, on_chunk, on_notice))

    async def _turn(self, turn: TurnCall) -> Completion:
        """One model turn: a request through the retry loop (a wire format whose server
        may pause a turn sends it back from here)."""
        request = self.request_body(turn.messages, turn.tools)
        completion = await complete_with_retry(
            self.config, self.model_name, self._limiter, lambda: self._attempt(request, turn), turn
        )
        # A call made in a vendor's own edit-tool shape comes back as our tool's call.
        return from_vendor(edit_shape(self.config.kind, self.config.edit_tools), completion)

    async def aclose(self) -> None:
        """Close the adapter's own connection pool."""
        await self._http.aclose()

    # --- the wire format ------------------------------------------------------------------

    def request_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """The JSON body of the request."""
        raise NotImplementedError

    def _client(self, key: str, http_client: httpx2.AsyncClient) -> Any:
        """The SDK's client for one call: keyed, without retries of its own, on our pool."""
        return self.client_class(
            api_key=key,
            base_url=self.config.base_url,
            max_retries=0,
            timeout=http_timeout(self.config),
            http_client=http_client,
        )

    async def _open(self, client: Any, request: dict[str, Any]) -> Any:
        """Send the request; the SDK's stream once the server's head has arrived."""
        raise NotImplementedError

    def _assembly(self) -> Assembly:
        """An empty assembly for a streamed answer."""
        raise NotImplementedError

    async def _fold(self, acc: Assembly, event: Any, turn: TurnCall) -> None:
        """Fold one streamed event into the assembly; text goes to the turn as it arrives."""
        raise NotImplementedError

    def _finished(self, acc: Assembly) -> bool:
        """Whether the stream said its answer is complete."""
        raise NotImplementedError

    def _completion(self, acc: Assembly) -> Completion:
        """What an assembled answer says, as a Completion."""
        raise NotImplementedError

    async def _read_body(self, body: Any, turn: TurnCall) -> Completion:
        """A whole JSON answer (from a server that does not stream) as a Completion."""
        raise NotImplementedError

    # --- one call -------------------------------------------------------------------------

    async def _attempt(self, request: dict[str, Any], turn: TurnCall) -> Completion:
        """One HTTP call; every failure leaves as a ProviderError without the SDK's traceback."""
        key = await load_key(self.config, self._key_loader)
        client: Any = self._client(key, self._http.get())
        failure: BaseException
        answered = False
        try:
            stream = await asyncio.wait_for(self._open(client, request), self._first_byte_s)
            answered = True
            async with stream:
                if is_json_answer(stream.response):
                    # A server that ignores `stream: true` sent the whole answer.
                    body = json.loads(await stream.response.aread())
                    return await self._read_body(body, turn)
                return await self._read_stream(stream, turn, key)
        except CallbackError as exc:
            failure = exc.original
        except Exception as exc:
            failure = self._translate(exc, answered)
        finally:
            # Tracebacks keep frames alive; this one must not keep the keyed client.
            client = None
        if isinstance(failure, ProviderError):
            failure = scrub(failure, key)
        key = ""
        # Raised here, outside the except block, so no SDK exception rides along as context.
        raise failure

    async def _read_stream(self, stream: Any, turn: TurnCall, key: str) -> Completion:
        """Consume the event stream into a Completion; a stream that ends before the
        vendor's last event was cut."""
        acc = self._assembly()
        events = 0
        async for event in stream:
            events += 1
            await turn.chunk()
            await self._fold(acc, event, turn)
        if events == 0:
            raise turn.empty_answer(self.config, await self._window(key))
        if not self._finished(acc):
            raise errors.stream_cut(self.config.key, self.unfinished)
        return self._completion(acc)

    @property
    def _first_byte_s(self) -> float:
        """How long a request waits for the head of its answer."""
        return min(self.config.first_byte_timeout_s, self.config.timeout_s)

    async def _window(self, key: str) -> int | None:
        """The model's window: the provider file's, else what its server says (llama.cpp
        answers a prompt over its window with an empty 200)."""
        return configured_window(self.config) or await server_window(
            self.config, self.model_name, self._http.get(), key
        )

    def _translate(self, exc: Exception, answered: bool) -> ProviderError:
        """An SDK or transport exception as a classified ProviderError; `answered` when the
        server had sent its 200 (a connection lost after it is a cut stream)."""
        config, sdk = self.config, self.sdk
        if isinstance(exc, ProviderError):
            return exc
        if isinstance(exc, TimeoutError) and not answered:
            return errors.no_first_byte(config.key, config.base_url, self._first_byte_s)
        if isinstance(exc, sdk.APIStatusError):
            # Errors streamed after a 200 arrive here too; classify reads their type.
            return errors.classify(
                exc.status_code, exc.body, exc.response.headers, provider=config.key
            )
        if isinstance(exc, sdk.APIConnectionError) and not answered and errors.hung_up(exc):
            return errors.closed_early(config.key, cause_text(exc))
        # A connection that never opened is no slow model (the aiohttp transport reports
        # a refused connection as a connect timeout): it is unreachable.
        if isinstance(exc, sdk.APITimeoutError) and not errors.never_connected(exc):
            return errors.timed_out(config.key, config.base_url, config.timeout_s)
        if isinstance(exc, sdk.APIConnectionError) and answered:
            return errors.stream_cut(config.key, cause_text(exc))
        if isinstance(exc, sdk.APIConnectionError):
            return errors.unreachable(config.key, config.base_url, cause_text(exc))
        if isinstance(exc, sdk.APIError):
            # An error event inside an otherwise successful stream.
            body = exc.body if exc.body is not None else exc.message
            return errors.classify(None, body, None, provider=config.key)
        if isinstance(exc, httpx2.TransportError | httpx2.StreamError):
            return errors.stream_cut(config.key, f"{type(exc).__name__}: {exc}")
        if isinstance(exc, ValueError) and answered:
            return errors.incompatible(config.key, f"the answer is not valid JSON: {exc}")
        return errors.incompatible(config.key, f"unexpected {type(exc).__name__}: {exc}")


def cause_text(exc: BaseException) -> str:
    """The underlying reason of a connection error ("All connection attempts failed", ...)."""
    cause = exc.__cause__ or exc.__context__
    text = str(cause) if cause is not None and str(cause) else str(exc)
    return errors.redact(text)


def field_of(obj: Any, name: str) -> Any:
    """A field of an SDK object or of a plain dict (vendor extras arrive as dicts)."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)
