"""``AgentMemStore``: a LangGraph ``BaseStore`` in agentmem's PostgreSQL (migration 010).

Items live in ``store_memory`` (namespace as ``text[]``, key, jsonb value, TTL) and the
vectors of their indexed fields in ``store_vectors`` (one row per field path, embedded
by the manager's own model), both per-user tables: row-level security, ``forget_user``
and ``purge_expired`` cover them like every other table.

**Whose item is it.** The namespace names the user: by default its first element
(``("alice", "memories")``), or the element at ``user_at`` (``user_at=1`` for the
``("memories", user_id)`` layout of LangGraph's examples). A put or get whose namespace
is too short to name a user is refused. A search whose prefix names the user, or a
namespace listing whose prefix condition does, runs in that user's transaction (so
through the app role of row-level security too); one that spans users (an empty
prefix, a wildcard at the user's position) is for the schema owner, as every cross-user
read of agentmem (``AccessDeniedError`` through the app role).

**Semantics** follow LangGraph's own stores: within one ``batch``, reads see the store
as it was before the batch and puts apply after them (the last put of an item wins);
search ranks by the best cosine similarity over the item's indexed fields, items with
no vector after the scored ones; without a query, the most recently updated first.
``filter`` takes values (nested dicts match nested objects, lists whole lists) and
``$eq $ne $gt $gte $lt $lte``, evaluated in SQL on the jsonb value (the order
operators compare numbers; a value that is not a number does not match). Differences
from ``InMemoryStore``, on purpose: a put replaces the item's vectors (the in-memory
store keeps a field's old vector when a new value lacks the field), ``true`` is not
``1``, and items expire (it has no TTL).

**TTL** (minutes): ``PutOp.ttl`` or ``TTLConfig.default_ttl``; an item whose time has
passed is gone for every read at once (never returned, listed or counted), and its row
is deleted by ``mm.purge_expired()`` (the ``expires_at`` column). Reads refresh the TTL
of what they return unless ``refresh_ttl=False`` (or ``refresh_on_read: False``).
``clock`` replaces the database clock (tests).

``abatch`` runs ``batch`` in a worker thread.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from collections.abc import Callable, Iterable, Mapping, Sequence

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from memory.errors import ConfigurationError, InvalidInputError
from memory.integrations._extras import missing
from memory.store.isolation import require_owner
from memory.store.validation import check_id, check_object, check_text
from memory.tables.base import EMBED_CHARS

try:
    from langgraph.store.base import (NOT_PROVIDED, BaseStore, GetOp, IndexConfig, InvalidNamespaceError, Item,
                                      ListNamespacesOp, NotProvided, Op, PutOp, Result, SearchItem, SearchOp,
                                      TTLConfig, validate_op_namespace)
    from langgraph.store.base.embed import get_text_at_path, tokenize_path
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    raise missing("langgraph", "langgraph", exc) from exc

__all__ = ["AgentMemStore", "StoreNamespaceError"]

_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
_ORDER = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_NOW = sql.SQL("COALESCE(%(now)s::timestamptz, clock_timestamp())")
_LIVE = sql.SQL("(s.expires_at IS NULL OR s.expires_at > {})").format(_NOW)


_NO_SCORE = sql.SQL("NULL::float8")  # defaults of _fetch: no score column, no ORDER BY / LIMIT
_NO_TAIL = sql.SQL("")

class StoreNamespaceError(InvalidInputError, InvalidNamespaceError):
    """A namespace LangGraph or agentmem cannot use (empty, a label with '.', no user in it)."""


@dataclass
class _Read:
    index: int
    op: GetOp | SearchOp | ListNamespacesOp
    user: str | None  # None: spans users (schema owner only)


class AgentMemStore(BaseStore):
    """LangGraph's store over agentmem's tables: ``graph.compile(store=AgentMemStore(mm))``."""

    supports_ttl = True

    def __init__(self, mm: Any, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 user_at: int = 0, clock: Callable[[], datetime] | None = None) -> None:
        if isinstance(user_at, bool) or not isinstance(user_at, int) or user_at < 0:
            raise ConfigurationError(f"user_at must be a namespace position (0, 1, ...), got {user_at!r}")
        self.mm = mm
        self.user_at = user_at
        self.clock = clock
        self.ttl_config = ttl
        self.index_config = None
        self._fields: list[tuple[str, str | list[str]]] = []
        if index is not None:
            self.index_config = dict(index)
            if index.get("embed") is not None:
                raise ConfigurationError(
                    "AgentMemStore embeds with agentmem's own model (the one the schema was created with): "
                    "leave 'embed' out of index")
            dims = index.get("dims")
            if dims is not None and dims != mm.db.dimension:
                raise ConfigurationError(f"index dims={dims}, but this schema's vectors have {mm.db.dimension} "
                                         "dimensions: leave 'dims' out or set it to that")
            self._fields = [(p, p if p == "$" else tokenize_path(p)) for p in (index.get("fields") or ["$"])]

    # -- LangGraph's entry points ------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        reads: list[_Read] = []
        puts: dict[tuple[str, tuple[str, ...], str], PutOp] = {}
        for i, op in enumerate(ops):
            try:
                validate_op_namespace(op)
            except InvalidNamespaceError as exc:
                raise StoreNamespaceError(str(exc)) from None
            if isinstance(op, PutOp):
                self._check_put(op)
                puts[(self._user_of(op.namespace), tuple(op.namespace), op.key)] = op
            elif isinstance(op, GetOp):
                check_text(op.key, "key", max_chars=self.mm.settings.max_id_chars, allow_empty=True)
                reads.append(_Read(i, op, self._user_of(op.namespace)))
            elif isinstance(op, SearchOp):
                self._check_search(op)
                reads.append(_Read(i, op, self._user_in_prefix(op.namespace_prefix)))
            elif isinstance(op, ListNamespacesOp):
                self._check_listing(op)
                reads.append(_Read(i, op, self._user_of_listing(op)))
            else:
                raise InvalidInputError(f"unknown store operation {type(op).__name__}: use GetOp, SearchOp, "
                                        "ListNamespacesOp or PutOp")
        results: list[Result] = [None] * len(ops)
        queries = self._query_vectors([r.op for r in reads])
        by_user: dict[str | None, list[_Read]] = defaultdict(list)
        for r in reads:
            by_user[r.user].append(r)
        args = {"now": self.clock() if self.clock else None}
        for user, group in by_user.items():
            with self.mm.db.connection(user) as conn:
                if user is None:
                    require_owner(conn, "a store read whose namespace names no user")
                for r in group:
                    results[r.index] = self._read(conn, r, args, queries)
        self._apply_puts(puts, args)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def put(self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any],
            index: Literal[False] | list[str] | None = None, *, ttl: float | None | NotProvided = NOT_PROVIDED) -> None:
        try:
            super().put(namespace, key, value, index, ttl=ttl)
        except InvalidNamespaceError as exc:
            if isinstance(exc, StoreNamespaceError):
                raise
            raise StoreNamespaceError(str(exc)) from None

    async def aput(self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any],
                   index: Literal[False] | list[str] | None = None, *,
                   ttl: float | None | NotProvided = NOT_PROVIDED) -> None:
        try:
            await super().aput(namespace, key, value, index, ttl=ttl)
        except InvalidNamespaceError as exc:
            if isinstance(exc, StoreNamespaceError):
                raise
            raise StoreNamespaceError(str(exc)) from None

    # -- validation ------------------------------------------------------------------------
    def _user_of(self, namespace: Sequence[str]) -> str:
        if len(namespace) <= self.user_at:
            raise StoreNamespaceError(
                f"namespace {tuple(namespace)!r} names no user: AgentMemStore(user_at={self.user_at}) reads the user "
                f"id from element {self.user_at} of the namespace, e.g. "
                f"{('memories',) * self.user_at + ('<user id>', 'memories')!r}")
        return check_id(namespace[self.user_at], "the namespace's user id", max_chars=self.mm.settings.max_id_chars)

    def _user_in_prefix(self, prefix: Sequence[str]) -> str | None:
        if len(prefix) > self.user_at and prefix[self.user_at] != "*":
            return self._user_of(prefix)
        return None

    def _user_of_listing(self, op: ListNamespacesOp) -> str | None:
        users = {self._user_in_prefix(c.path) for c in op.match_conditions or () if c.match_type == "prefix"}
        users.discard(None)
        if len(users) > 1:
            return None  # two prefixes naming different users match nothing; the owner may say so
        return users.pop() if users else None

    def _check_put(self, op: PutOp) -> None:
        s = self.mm.settings
        check_text(op.key, "key", max_chars=s.max_id_chars, allow_empty=True)
        if op.value is not None:
            if not isinstance(op.value, Mapping):
                raise InvalidInputError(f"a store value must be a dict, got {type(op.value).__name__}")
            check_object(dict(op.value), "value", max_chars=s.max_content_chars)
        if op.index is not None and op.index is not False and (
                not isinstance(op.index, list) or not all(isinstance(p, str) and p for p in op.index)):
                raise InvalidInputError("index must be False, None or a list of field paths such as ['text']")
        if op.ttl is not None and (isinstance(op.ttl, bool) or not isinstance(op.ttl, (int, float))
                                   or not op.ttl > 0 or op.ttl > 1e9):
            raise InvalidInputError(f"ttl is in minutes and must be a positive number, got {op.ttl!r}")
        for label in op.namespace:
            check_text(label, "namespace label", max_chars=s.max_id_chars)

    def _check_search(self, op: SearchOp) -> None:
        if isinstance(op.limit, bool) or not isinstance(op.limit, int) or op.limit < 0 or op.limit > 10_000:
            raise InvalidInputError(f"limit must be an integer from 0 to 10,000, got {op.limit!r}")
        if isinstance(op.offset, bool) or not isinstance(op.offset, int) or op.offset < 0:
            raise InvalidInputError(f"offset must be a non-negative integer, got {op.offset!r}")
        if op.filter is not None:
            if not isinstance(op.filter, dict):
                raise InvalidInputError(f"filter must be a dict, got {type(op.filter).__name__}")
            _filter_sql(op.filter, [])  # raises on an unknown operator or a bad operand
        if op.query is not None:
            text = check_text(op.query, "query", max_chars=self.mm.settings.max_content_chars, allow_empty=True)
            if len(text) > self.mm.settings.max_query_chars:
                raise InvalidInputError(f"search query is {len(text):,} characters; at most "
                                        f"{self.mm.settings.max_query_chars:,} are searched")

    def _check_listing(self, op: ListNamespacesOp) -> None:
        for c in op.match_conditions or ():
            if c.match_type not in ("prefix", "suffix"):
                raise InvalidInputError(f"match_type must be 'prefix' or 'suffix', got {c.match_type!r}")
        if op.max_depth is not None and (isinstance(op.max_depth, bool) or not isinstance(op.max_depth, int)
                                         or op.max_depth < 1):
            raise InvalidInputError(f"max_depth must be a positive integer or None, got {op.max_depth!r}")
        for name, value in (("limit", op.limit), ("offset", op.offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInputError(f"{name} must be a non-negative integer, got {value!r}")

    # -- reads -----------------------------------------------------------------------------
    def _query_vectors(self, ops: Sequence[Any]) -> dict[str, Any]:
        if not self._fields:
            return {}
        texts = sorted({op.query for op in ops if isinstance(op, SearchOp) and op.query})
        if not texts:
            return {}
        return dict(zip(texts, self.mm.embeddings.embed([t[:EMBED_CHARS] for t in texts]), strict=True))

    def _read(self, conn: Any, r: _Read, args: dict[str, Any], queries: dict[str, Any]) -> Result:
        op = r.op
        if isinstance(op, GetOp):
            rows = self._fetch(conn, sql.SQL("s.user_id = %(uid)s AND s.namespace = %(ns)s AND s.key = %(key)s"),
                               dict(args, uid=r.user, ns=list(op.namespace), key=op.key))
            self._refresh(conn, rows, args, op.refresh_ttl)
            return _item(rows[0]) if rows else None
        if isinstance(op, SearchOp):
            return self._search(conn, r.user, op, args, queries)
        return self._list(conn, r.user, op, args)

    def _fetch(self, conn: psycopg.Connection[Any], where: sql.Composable, args: dict[str, Any],
               score: sql.Composable = _NO_SCORE, tail: sql.Composable = _NO_TAIL) -> list[dict[str, Any]]:
        stmt = sql.SQL(
            "SELECT * FROM (SELECT s.user_id, s.namespace, s.key, s.value, s.created_at, s.updated_at,"
            " s.ttl_minutes, {score} AS score FROM store_memory s WHERE {where} AND {live}) s{tail}"
        ).format(score=score, where=where, live=_LIVE, tail=tail)
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(stmt, args).fetchall()

    def _search(self, conn: Any, user: str | None, op: SearchOp, args: dict[str, Any],
                queries: dict[str, Any]) -> list[SearchItem]:
        conds: list[sql.Composable] = []
        params = dict(args, limit=op.limit, offset=op.offset)
        if user is not None:
            conds.append(sql.SQL("s.user_id = %(uid)s"))
            params["uid"] = user
        prefix = list(op.namespace_prefix)
        if prefix:
            conds.append(sql.SQL("cardinality(s.namespace) >= %(n)s AND s.namespace[1:%(n)s] = %(prefix)s::text[]"))
            params.update(n=len(prefix), prefix=prefix)
        if op.filter:
            fsql, fparams = _filter_sql(op.filter, [])
            conds.append(fsql)
            params.update(fparams)
        where = sql.SQL(" AND ").join(conds) if conds else sql.SQL("true")
        qvec = queries.get(op.query) if op.query else None
        if qvec is None:
            rows = self._fetch(conn, where, params, tail=sql.SQL(
                " ORDER BY s.updated_at DESC, s.user_id, s.namespace, s.key LIMIT %(limit)s OFFSET %(offset)s"))
        else:
            params["qvec"] = qvec
            # Exact cosine over the matching items' field vectors (NaN, from a zero vector, scores 0).
            score = sql.SQL(
                "(SELECT max(CASE WHEN d = 'NaN'::float8 THEN 0 ELSE 1 - d END) FROM ("
                "SELECT v.embedding <=> %(qvec)s AS d FROM store_vectors v WHERE v.user_id = {user}"
                " AND v.namespace = s.namespace AND v.key = s.key) x)").format(
                user=sql.SQL("s.user_id") if user is None else sql.SQL("%(uid)s"))
            rows = self._fetch(conn, where, params, score=score, tail=sql.SQL(
                " ORDER BY score IS NULL, score DESC, s.updated_at DESC, s.user_id, s.namespace, s.key"
                " LIMIT %(limit)s OFFSET %(offset)s"))
        self._refresh(conn, rows, args, op.refresh_ttl)
        return [_search_item(row) for row in rows]

    def _list(self, conn: Any, user: str | None, op: ListNamespacesOp, args: dict[str, Any]) -> list[tuple[str, ...]]:
        conds: list[sql.Composable] = [_LIVE]
        params: dict[str, Any] = dict(args, limit=op.limit, offset=op.offset, depth=op.max_depth)
        if user is not None:
            conds.append(sql.SQL("s.user_id = %(uid)s"))
            params["uid"] = user
        for c, cond in enumerate(op.match_conditions or ()):
            path = list(cond.path)
            conds.append(sql.SQL("cardinality(s.namespace) >= {}").format(sql.Literal(len(path))))
            for i, label in enumerate(path):
                if label == "*":
                    continue
                name = f"m{c}_{i}"
                params[name] = label
                pos: sql.Composable
                if cond.match_type == "prefix":
                    pos = sql.Literal(i + 1)
                else:
                    pos = sql.SQL("cardinality(s.namespace) - {}").format(sql.Literal(len(path) - 1 - i))
                conds.append(sql.SQL("s.namespace[{}] = {}").format(pos, sql.Placeholder(name)))
        # Code-point order, as Python sorts the tuples (a prefix before its extensions).
        stmt = sql.SQL(
            "SELECT DISTINCT (CASE WHEN %(depth)s::int IS NULL THEN s.namespace"
            " ELSE s.namespace[1:%(depth)s::int] END) COLLATE \"C\" AS ns FROM store_memory s WHERE {}"
            " ORDER BY ns LIMIT %(limit)s OFFSET %(offset)s").format(sql.SQL(" AND ").join(conds))
        return [tuple(row[0]) for row in conn.execute(stmt, params)]

    def _refresh(self, conn: Any, rows: list[dict[str, Any]], args: dict[str, Any], refresh: bool) -> None:
        """Start the TTL of what a read returned again (items that have one)."""
        due = [r for r in rows if r["ttl_minutes"] is not None]
        if not refresh or not due:
            return
        with conn.cursor() as cur:
            cur.executemany(sql.SQL(
                "UPDATE store_memory SET expires_at = {} + ttl_minutes * interval '1 minute'"
                " WHERE user_id = %(uid)s AND namespace = %(ns)s AND key = %(key)s AND ttl_minutes IS NOT NULL"
            ).format(_NOW), [dict(args, uid=r["user_id"], ns=r["namespace"], key=r["key"]) for r in due])

    # -- writes ----------------------------------------------------------------------------
    def _texts(self, op: PutOp) -> list[tuple[str, str]]:
        """(field path, text) pairs to embed for a put, as LangGraph's stores name them."""
        if op.value is None or op.index is False or not self._fields:
            return []
        fields = self._fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
        out: list[tuple[str, str]] = []
        for path, tokens in fields:
            texts = get_text_at_path(dict(op.value), tokens)
            if len(texts) == 1:
                out.append((path, texts[0]))
            else:
                out.extend((f"{path}.{i}", text) for i, text in enumerate(texts))
        for _, text in out:
            check_text(text, "an indexed field", max_chars=self.mm.settings.max_content_chars, allow_empty=True)
        return out

    def _apply_puts(self, puts: dict[tuple[str, tuple[str, ...], str], PutOp], args: dict[str, Any]) -> None:
        if not puts:
            return
        texts = {k: self._texts(op) for k, op in puts.items()}
        flat = [t for pairs in texts.values() for _, t in pairs]
        vectors = iter(self.mm.embeddings.embed([t[:EMBED_CHARS] for t in flat]) if flat else [])
        by_user: dict[str, list[tuple[str, tuple[str, ...], str]]] = defaultdict(list)
        for k in puts:
            by_user[k[0]].append(k)
        planned = {k: [(path, next(vectors)) for path, _ in texts[k]] for k in puts}
        for user, keys in by_user.items():
            with self.mm.db.connection(user) as conn:
                for k in keys:
                    self._put(conn, k, puts[k], planned[k], args)

    def _put(self, conn: Any, k: tuple[str, tuple[str, ...], str], op: PutOp,
             vectors: list[tuple[str, Any]], args: dict[str, Any]) -> None:
        user, namespace, key = k
        ident = dict(args, uid=user, ns=list(namespace), key=key)
        if op.value is None:
            conn.execute("DELETE FROM store_memory WHERE user_id = %(uid)s AND namespace = %(ns)s AND key = %(key)s",
                         ident)
            return
        conn.execute(sql.SQL(
            "INSERT INTO store_memory AS s (user_id, namespace, key, value, ttl_minutes, expires_at, created_at,"
            " updated_at) VALUES (%(uid)s, %(ns)s, %(key)s, %(value)s, %(ttl)s,"
            " {now} + %(ttl)s * interval '1 minute', {now}, {now})"
            " ON CONFLICT (user_id, namespace, key) DO UPDATE SET value = EXCLUDED.value,"
            " updated_at = EXCLUDED.updated_at, ttl_minutes = EXCLUDED.ttl_minutes, expires_at = EXCLUDED.expires_at,"
            # an item that had expired (not yet purged) comes back as a new one
            " created_at = CASE WHEN {live} THEN s.created_at ELSE EXCLUDED.created_at END"
        ).format(now=_NOW, live=_LIVE), dict(ident, value=Jsonb(dict(op.value)),
                                            ttl=None if op.ttl is None else float(op.ttl)))
        conn.execute("DELETE FROM store_vectors WHERE user_id = %(uid)s AND namespace = %(ns)s AND key = %(key)s",
                     ident)
        if vectors:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO store_vectors (user_id, namespace, key, field_path, embedding)"
                    " VALUES (%(uid)s, %(ns)s, %(key)s, %(path)s, %(vec)s)",
                    [dict(ident, path=path, vec=vec) for path, vec in vectors])


def _item(row: dict[str, Any]) -> Item:
    return Item(value=row["value"], key=row["key"], namespace=tuple(row["namespace"]),
                created_at=row["created_at"], updated_at=row["updated_at"])


def _search_item(row: dict[str, Any]) -> SearchItem:
    return SearchItem(namespace=tuple(row["namespace"]), key=row["key"], value=row["value"],
                      created_at=row["created_at"], updated_at=row["updated_at"],
                      score=None if row["score"] is None else float(row["score"]))


def _jsonb(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _filter_sql(filt: dict[str, Any], path: list[str]) -> tuple[sql.Composable, dict[str, Any]]:
    """The SQL of a LangGraph filter over ``s.value`` (values bound), and its parameters."""
    conds: list[sql.Composable] = []
    params: dict[str, Any] = {}
    for key, want in filt.items():
        if not isinstance(key, str):
            raise InvalidInputError(f"filter keys are field names (strings), got {key!r}")
        here = path + [key]
        if isinstance(want, dict) and any(isinstance(k, str) and k.startswith("$") for k in want):
            for op, operand in want.items():
                if op not in _OPERATORS:
                    raise InvalidInputError(f"filter operator {op!r} is not one of {', '.join(_OPERATORS)}")
                c, p = _compare(here, op, operand)
                conds.append(c)
                params.update(p)
        elif isinstance(want, dict):
            p_name = f"fo{next(_counter)}"
            conds.append(sql.SQL("jsonb_typeof(s.value #> {}::text[]) = 'object'").format(sql.Placeholder(p_name)))
            params[p_name] = here
            inner, inner_params = _filter_sql(want, here)
            conds.append(inner)
            params.update(inner_params)
        else:
            c, p = _compare(here, "$eq", want)
            conds.append(c)
            params.update(p)
    if not conds:
        return sql.SQL("true"), params
    return sql.SQL("(") + sql.SQL(" AND ").join(conds) + sql.SQL(")"), params


#: Unique placeholder names within a statement (itertools.count, shared by every filter).
_counter = itertools.count()


def _compare(path: list[str], op: str, operand: Any) -> tuple[sql.Composable, dict[str, Any]]:
    n = next(_counter)
    p_path, p_val = f"fp{n}", f"fv{n}"
    at = sql.SQL("s.value #> {}::text[]").format(sql.Placeholder(p_path))
    params: dict[str, Any] = {p_path: path}
    if op in _ORDER:
        if isinstance(operand, bool) or not isinstance(operand, (int, float)):
            raise InvalidInputError(f"filter {op} compares numbers; got {operand!r}")
        params[p_val] = float(operand)
        return sql.SQL("(CASE WHEN jsonb_typeof({at}) = 'number' THEN ({at})::float8 END {cmp} {v})").format(
            at=at, cmp=sql.SQL(_ORDER[op]), v=sql.Placeholder(p_val)), params
    missing_or_null = sql.SQL("({at} IS NULL OR {at} = 'null'::jsonb)").format(at=at)
    if operand is None:
        return (missing_or_null if op == "$eq" else sql.SQL("NOT ") + missing_or_null), params
    try:
        params[p_val] = _jsonb(operand)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"filter value {operand!r} is not JSON: {exc}") from None
    cmp = "=" if op == "$eq" else "IS DISTINCT FROM"
    return sql.SQL("({at} " + cmp + " {v}::jsonb)").format(at=at, v=sql.Placeholder(p_val)), params
