"""How answers are decoded: the one setting evaluation blesses a model under (recorded
with the blessing) and the server answers with by default (serving.json), so what users
get is what was judged. The watermark stage's cost is measured greedy, as the default is."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .errors import InputError

# Below this, logits divided by the temperature overflow (inf - inf is NaN): greedy decoding
# is asked for as such, not as a temperature near 0.
MIN_TEMPERATURE = 0.01


class Decoding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    do_sample: bool = Field(False, description="False: greedy, the default evaluation blesses.")
    temperature: float = Field(1.0, ge=MIN_TEMPERATURE, le=100.0)
    top_k: int = Field(0, ge=0, description="0: no top-k cut.")
    top_p: float = Field(1.0, gt=0, le=1, description="1: no nucleus cut.")
    max_new_tokens: int = Field(24, ge=1, description="A bound: answers end at the model's EOS.")

    def generate_kwargs(self) -> dict:
        """The arguments `generation.generate` takes for this decoding."""
        return {
            "do_sample": self.do_sample,
            "temperature": self.temperature,
            "top_k": self.top_k or None,
            "top_p": self.top_p if self.top_p < 1 else None,
            "max_new_tokens": self.max_new_tokens,
        }

    @classmethod
    def from_record(cls, record: dict | None, origin: str) -> Decoding:
        """The decoding a blessing recorded; a record without one (older blessings) gets
        evaluation's defaults, which is what it was judged under unless its config said."""
        value = (record or {}).get("decoding")
        if value is None:
            return cls()
        try:
            return cls.model_validate(value)
        except ValueError as exc:
            first = exc.errors()[0] if hasattr(exc, "errors") else {"loc": (), "msg": str(exc)}
            where = ".".join(str(p) for p in first["loc"])
            raise InputError(f"{origin}: decoding.{where}: {first['msg']}") from None
