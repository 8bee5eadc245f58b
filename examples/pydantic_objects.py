"""Objects out: a Pydantic model in, validated instances out, with the default model.

    python examples/pydantic_objects.py [N]

Draws N (default 10) sampled generations (temperature 0.7, seeds 0..N-1, in one
``search.generate_batch`` call) of the
``Person`` model below -- nested models, ``Optional``, a discriminated union,
``Literal``, a ``datetime`` and a constrained list -- and prints, for each, whether
it ended by itself and the validated object. The model's objects are compiled
closed (Pydantic ignores unknown fields by default, and a grammar that allowed
them would let the model invent keys until it ran out of tokens).
"""

from __future__ import annotations

import datetime
import sys
import time
from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, Field

import search


class Address(BaseModel):
    street: str = Field(max_length=40)
    city: str = Field(max_length=30)
    country: Literal["UK", "US", "FR", "DE"]


class Cat(BaseModel):
    kind: Literal["cat"]
    indoor: bool


class Dog(BaseModel):
    kind: Literal["dog"]
    breed: str = Field(max_length=20)


class Person(BaseModel):
    name: str = Field(max_length=30)
    age: int = Field(ge=0, le=120)
    email: Optional[str] = Field(default=None, max_length=40)
    address: Address
    pet: Union[Cat, Dog] = Field(discriminator="kind")
    born: datetime.datetime
    skills: Annotated[list[Annotated[str, Field(max_length=20)]], Field(min_length=1, max_length=3)]


def main(n: int = 10) -> int:
    lm = search.load_default_model()
    t0 = time.perf_counter()
    # one batch: row i is what generate(..., seed=i) would give
    results = search.generate_batch(lm, ["Describe a person called Ada as JSON."] * n,
                                    constraints=Person, temperature=0.7, seed=list(range(n)),
                                    max_new_tokens=400)
    ok = 0
    for seed, r in enumerate(results):
        ok += isinstance(r.value, Person)
        print(f"seed {seed}: {r.stop_reason}, {len(r.token_ids)} tokens -> {r.value!r}"
              if r.value is not None else f"seed {seed}: {r.stop_reason}: {r.value_error}")
    print(f"{ok}/{n} validated Person instances in {time.perf_counter() - t0:.1f} s")
    return 0 if ok == n else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
