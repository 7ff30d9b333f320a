"""Parse and validate trade events in the JVM: Kafka rows in, typed events (or a DLQ reason) out.

Pure DataFrame → DataFrame, column expressions only (no Python UDF): the JSON is parsed once into
Spark's VARIANT (`try_parse_json`), whose exact JSON types (`schema_of_variant`) let us tell an
integer from a float or a string as the contract requires. The checks and reason codes mirror
:func:`aldebaran.audit.parse.validate`, the reference validator; tests hold the two to the same verdicts.

Two gaps of the variant parser are closed here:

- It stops after the first JSON value and ignores what follows (``{...} x``, ``{...}{}``). A flat
  object (the trade format: no ``[``, a single ``}``, which ends the message but for whitespace)
  cannot be followed by anything, and is parsed as is. Any other message is parsed wrapped as
  ``[<message>,<h>]`` with ``h`` = xxhash64 of the message: it is one JSON value followed by whitespace
  only iff the array parses and its second element is ``h`` (trailing content would have to contain
  its own hash). The wrapper costs one nesting level: hence ``jsontext.MAX_JSON_DEPTH``, which a flat
  object never nears.
- It keeps a float literal that has an integral value (``100.0``, ``-0.0``) as a DECIMAL of scale 0,
  like an integer beyond BIGINT, and an integer literal beyond DECIMAL(38) as a DOUBLE, like ``1e40``.
  For those rare types only, the field's literal is read again (`get_json_object`, which keeps an
  integer literal's digits) to tell an integer from a float.

**Fast path.** That general parse costs ~4× a plain `from_json` (`aldebaran bench parse-cost`). Most
messages are in the publisher's own shape, which one regular expression (:func:`fast_shape_regex`) can
prove valid: the fields in the publisher's order (``id``, optional ``initial_order_id``, ``#shares``,
``client``, ``stock``, optional ``ts``), no other key (so no duplicate either), ids a non-empty string
without escapes or control characters within the length limit or an integer of at most 18 digits,
``#shares`` a non-negative integer without sign (``0`` is valid), ``client``/``stock`` strings without
escapes, ``ts`` a non-negative integer of at most 18 digits. A message the expression accepts (and
whose bytes are valid UTF-8 within the size limit, and whose shares are within the limit) is valid by
every check below, so its fields are read with a `from_json` of plain types; every other message takes
the general path. The fast path never decides that a message is invalid: it only skips checks that
cannot fail.
"""

from __future__ import annotations

from aldebaran.audit import parse as events


Limits = events.Limits  # the configured limits, shared with the reference and the Python parser


# The fast path's extraction: plain types are exact for a message fast_shape_regex accepted (an integer
# id's literal is its text, as the contract compares ids as strings).
FAST_SCHEMA = "id string, initial_order_id string, `#shares` long, client string, stock string, ts long"


def fast_shape_regex(limits: Limits = Limits()) -> str:
    """A Java regular expression for the publisher's message shape, every value of which is valid (see
    the module docstring). Anchored with \\A and \\z: Java's ``$`` would also match before a final
    line terminator such as U+2028, which JSON does not allow."""
    ws = r"[ \t\n\r]*"
    string_id = r'"[^"\\\x00-\x1f\x7f]{1,%d}"' % limits.max_id_length
    # An integer id counts against the length limit by its text: at most 18 digits (a BIGINT), sign included.
    digits, negative_digits = min(18, limits.max_id_length), min(18, limits.max_id_length - 1)
    integer_id = "(?:0|[1-9][0-9]{0,%d}%s)" % (
        digits - 1, "|-[1-9][0-9]{0,%d}" % (negative_digits - 1) if negative_digits >= 1 else "")
    ident = f"(?:{string_id}|{integer_id})"
    text = r'"[^"\\\x00-\x1f]*"'
    # 0 is valid (BRIEF §2); "-0" (also 0) is left to the general path, like every other spelling.
    shares = r"(?:0|[1-9][0-9]{0,%d})" % (len(str(limits.max_shares)) - 1)
    ts = r"(?:0|[1-9][0-9]{0,17})"

    def member(key: str, value: str) -> str:
        return f'"{key}"{ws}:{ws}{value}{ws}'

    return (r"\A" + ws + r"\{" + ws + member("id", ident) + "," + ws
            + f"(?:{member('initial_order_id', ident)},{ws})?"
            + member("#shares", shares) + "," + ws + member("client", text) + "," + ws + member("stock", text)
            + f"(?:,{ws}{member('ts', ts)})?" + r"\}" + ws + r"\z")


def parse_events(kafka_df, limits: Limits = Limits()):
    """Kafka source rows (key, value, topic, partition, offset, timestamp) → one row per message with
    `reason_code`/`reason` null for a valid event, the typed event columns otherwise null."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    # Stage 1: parse once (`_p`: the message, or [message, _h] unless it is a flat object; see the module
    # docstring). Stage 2: the message's value `_v` and whether it is valid JSON. Stage 3: extract each
    # field once (as a variant, its JSON type, its text). Later stages only reference these columns, so
    # the JSON is never re-parsed per check.
    ws = F.lit(" \t\n\r")
    text = F.col("_text")
    flat_object = (F.ltrim(text, ws).startswith("{") & ~text.contains("[")
                   & (F.instr(text, "}") == F.length(F.rtrim(text, ws))))
    # Stage 0, the fast path (module docstring): `_fast` rows are valid and read from `_j`; for them `_text`
    # is null, so the general path's expressions below cost next to nothing.
    raw_text = F.col("value").cast("string")
    shape = (F.col("value").isNotNull() & (F.octet_length("value") <= limits.max_message_bytes)
             & F.is_valid_utf8(raw_text) & raw_text.rlike(fast_shape_regex(limits)))
    j = F.col("_j")
    staged = kafka_df.select(
        "key", "value", "topic", "partition", "offset",
        (F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("kafka_ts"),
        F.coalesce(shape, F.lit(False)).alias("_shape"),
    ).select("*", F.from_json(F.when(F.col("_shape"), raw_text), FAST_SCHEMA).alias("_j"))
    staged = staged.select(
        "*", F.coalesce(F.col("_shape") & (j.getField("#shares") <= limits.max_shares), F.lit(False)).alias("_fast"),
    ).select("*", F.when(~F.col("_fast"), raw_text).alias("_text"))
    staged = staged.select("*", F.coalesce(flat_object, F.lit(False)).alias("_flat"))
    flat = F.col("_flat")
    staged = staged.select("*", F.when(~flat, F.xxhash64("_text")).alias("_h")).select(
        "*", F.try_parse_json(F.when(flat, text).otherwise(
            F.concat(F.lit("["), text, F.lit(","), F.col("_h").cast("string"), F.lit("]")))).alias("_p"),
    )
    p = F.col("_p")
    staged = staged.select(
        "*",
        F.when(flat, p).otherwise(F.try_variant_get(p, "$[0]", "variant")).alias("_v"),
        (p.isNotNull() & (flat | F.try_variant_get(p, "$[1]", "bigint").eqNullSafe(F.col("_h")))).alias("_json"),
    )
    keys = {"id": "id", "oid": "initial_order_id", "shares": "#shares", "client": "client", "stock": "stock",
            "ts": "ts"}
    staged = staged.select(
        "*", *[F.try_variant_get("_v", f"$['{key}']", "variant").alias(f"_{name}_v") for name, key in keys.items()]
    ).select(
        "*",
        *[F.schema_of_variant(f"_{name}_v").alias(f"_{name}_t") for name in keys],
        *[F.try_variant_get(f"_{name}_v", "$", "string").alias(f"_{name}_s") for name in ("id", "oid", "client", "stock")],
        F.try_variant_get("_shares_v", "$", "bigint").alias("_shares"),
        F.try_variant_get("_ts_v", "$", "bigint").alias("_ts"),
    )

    def t(name: str) -> Column:
        return F.col(f"_{name}_t")

    def absent(name: str) -> Column:
        return t(name).isNull() | (t(name) == F.lit("VOID"))

    def integer_literal(name: str) -> Column:
        """Whether the field was written as an integer: for DECIMAL(p,0) and DOUBLE values only (see above);
        evaluated lazily, inside CASE/AND, so ordinary messages never re-read their text."""
        literal = F.get_json_object(F.col("_text"), f"$['{keys[name]}']")
        return literal.rlike(r"^-?[0-9]+$")

    def integral_type(name: str) -> Column:
        return t(name).rlike(r"^DECIMAL\(\d+,0\)$") | (t(name) == F.lit("DOUBLE"))

    def is_int_id(name: str) -> Column:
        # A DOUBLE id is never accepted: an integer that needs one is beyond DECIMAL(38) (parse.MAX_INT_ID).
        return (t(name) == F.lit("BIGINT")) | (t(name).rlike(r"^DECIMAL\(\d+,0\)$") & integer_literal(name))

    def id_checks(field: str, name: str) -> list[tuple[Column, str, Column]]:
        s = F.col(f"_{name}_s")
        return [
            (absent(name), "missing_field", F.lit(f"'{field}' is required")),
            (~((t(name) == F.lit("STRING")) | is_int_id(name)), "ill_typed_field",
             F.concat(F.lit(f"'{field}' must be a string or an integer, got "), _json_name(t(name)))),
            (F.length(s) == 0, "invalid_id", F.lit(f"'{field}' is empty")),
            (F.length(s) > limits.max_id_length, "invalid_id",
             F.lit(f"'{field}' is longer than {limits.max_id_length} characters")),
            (s.rlike(r"[\x00-\x1f\x7f]"), "invalid_id", F.lit(f"'{field}' contains control characters")),
        ]

    v = F.col("_v")
    is_purchase = ~absent("oid")
    shares = F.col("_shares")
    checks: list[tuple[Column, str, Column]] = [
        (F.col("value").isNull(), "invalid_json", F.lit("message has no value")),
        (F.length(F.col("value")) > limits.max_message_bytes, "message_too_large",
         F.concat(F.length(F.col("value")).cast("string"), F.lit(f" bytes > {limits.max_message_bytes}"))),
        (~F.is_valid_utf8(text), "invalid_utf8", F.lit("message is not valid UTF-8")),
        (~F.col("_json"), "invalid_json", F.lit("message is not valid JSON")),
        (~F.ltrim(text, ws).startswith("{"), "not_an_object",
         F.concat(F.lit("message is a JSON "), _json_name(F.schema_of_variant(v)), F.lit(", not an object"))),
        *id_checks("id", "id"),
        *[(is_purchase & cond, code, msg) for cond, code, msg in id_checks("initial_order_id", "oid")],
        (absent("shares"), "missing_field", F.lit("'#shares' is required")),
        (t("shares").isin("STRING", "BOOLEAN") | t("shares").startswith("OBJECT") | t("shares").startswith("ARRAY"),
         "ill_typed_field", F.concat(F.lit("'#shares' must be an integer, got "), _json_name(t("shares")))),
        (integral_type("shares") & integer_literal("shares"), "shares_out_of_range",
         F.lit(f"'#shares' must be between 0 and {limits.max_shares}")),
        (t("shares") != F.lit("BIGINT"), "shares_not_integer", F.lit("'#shares' is not an integer")),
        ((shares < 0) | (shares > limits.max_shares), "shares_out_of_range",
         F.concat(F.lit("'#shares' is "), shares.cast("string"), F.lit(f", must be between 0 and {limits.max_shares}"))),
    ]
    for field in ("client", "stock"):
        checks.append((~is_purchase & absent(field), "missing_field", F.lit(f"'{field}' is required")))
        checks.append((~absent(field) & (t(field) != F.lit("STRING")), "ill_typed_field",
                       F.concat(F.lit(f"'{field}' must be a string, got "), _json_name(t(field)))))
    checks.append((~absent("ts") & ((t("ts") != F.lit("BIGINT")) | (F.col("_ts") < 0)), "ill_typed_field",
                   F.concat(F.lit("'ts' must be an integer (epoch ms), got "), _json_name(t("ts")))))

    # One CASE WHEN: the first failing check gives the code and the detail.
    code = F.when(F.coalesce(checks[0][0], F.lit(False)), F.struct(F.lit(checks[0][1]).alias("c"), checks[0][2].alias("d")))
    for cond, c, msg in checks[1:]:
        code = code.when(F.coalesce(cond, F.lit(False)), F.struct(F.lit(c).alias("c"), msg.alias("d")))
    fast = F.col("_fast")
    verdict = staged.select("*", F.when(~fast, code).alias("_verdict"),
                            F.when(fast, j.getField("initial_order_id").isNotNull()).otherwise(is_purchase).alias("_is_p"))

    valid = F.col("_verdict").isNull()

    def keep(fast_value: Column, general_value: Column) -> Column:
        return F.when(fast, fast_value).when(valid, general_value)

    is_p = F.col("_is_p")
    return verdict.select(
        "key", "value", "topic", "partition", "offset", "kafka_ts",
        F.col("_verdict.c").alias("reason_code"),
        F.concat(F.col("_verdict.c"), F.lit(": "), F.col("_verdict.d")).alias("reason"),
        F.when(fast | valid, F.when(is_p, F.lit(events.PURCHASE)).otherwise(F.lit(events.REQUEST))).alias("kind"),
        keep(j.getField("id"), F.col("_id_s")).alias("event_id"),
        keep(F.when(is_p, j.getField("initial_order_id")).otherwise(j.getField("id")),
             F.when(is_p, F.col("_oid_s")).otherwise(F.col("_id_s"))).alias("order_id"),
        keep(j.getField("#shares"), shares).alias("shares"),
        keep(j.getField("client"), F.col("_client_s")).alias("client"),
        keep(j.getField("stock"), F.col("_stock_s")).alias("stock"),
        keep(F.coalesce(j.getField("ts"), F.col("kafka_ts")), F.coalesce(F.col("_ts"), F.col("kafka_ts"))).alias("event_ts"),
        fast.alias("fast_path"),
    )


def _json_name(spark_type):
    """Spark variant type name → JSON type name, for reasons a person can read."""
    from pyspark.sql import functions as F

    t = spark_type
    return (
        F.when(t.isNull() | (t == "VOID"), F.lit("null"))
        .when(t == "BIGINT", F.lit("integer"))
        .when(t.startswith("DECIMAL") | (t == "DOUBLE"), F.lit("number"))
        .when(t == "STRING", F.lit("string"))
        .when(t == "BOOLEAN", F.lit("boolean"))
        .when(t.startswith("OBJECT"), F.lit("object"))
        .when(t.startswith("ARRAY"), F.lit("array"))
        .otherwise(F.lower(t))
    )
