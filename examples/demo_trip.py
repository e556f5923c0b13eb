"""Booking a trip, a saga: the flight and the hotel are booked through effects that
register how to undo them; the car rental then fails for good, and
``rt.compensate(run_id)`` cancels the hotel, then the flight (newest first, each once).

    harness run examples.demo_trip:graph --input '{"traveller": "ada", "city": "Lisbon"}'
    harness compensate RUN

The undo functions live at module level, so any process that can import this module
can compensate the run.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel

from runtime import EffectInfo, Graph, InvalidInputError, NodeContext, append

#: what the outside world saw, in order: "book flight …", "cancel flight …", …
BOOKINGS: list[str] = []


class Trip(BaseModel):
    traveller: str
    city: str
    flight: str = ""
    hotel: str = ""
    car: str = ""
    log: Annotated[list[str], append] = []


def cancel_flight(info: EffectInfo) -> None:
    BOOKINGS.append(f"cancel flight {info.result}")


def cancel_hotel(info: EffectInfo) -> None:
    BOOKINGS.append(f"cancel hotel {info.result}")


graph = Graph("trip", state=Trip)


@graph.node()
async def flight(state: Trip, ctx: NodeContext) -> dict[str, Any]:
    def book(info: EffectInfo) -> str:
        BOOKINGS.append(f"book flight {info.key[-6:]}")
        return f"FL-{state.city[:3].upper()}-{info.key[-4:]}"

    ref = await ctx.effect("airline.book", book, request={"traveller": state.traveller, "to": state.city},
                           compensate=cancel_flight)
    return {"flight": ref, "log": [f"flight {ref} booked"]}


@graph.node(after=["flight"])
async def hotel(state: Trip, ctx: NodeContext) -> dict[str, Any]:
    def book(info: EffectInfo) -> str:
        BOOKINGS.append(f"book hotel {info.key[-6:]}")
        return f"HT-{info.key[-4:]}"

    ref = await ctx.effect("hotels.book", book, request={"guest": state.traveller, "city": state.city,
                                                         "nights": 3}, compensate=cancel_hotel)
    return {"hotel": ref, "log": [f"hotel {ref} booked"]}


@graph.node(after=["hotel"])
async def car(state: Trip, ctx: NodeContext) -> dict[str, Any]:
    def rent() -> str:
        raise InvalidInputError(f"no cars left in {state.city} for those dates")

    ref = await ctx.effect("cars.rent", rent, request={"driver": state.traveller, "city": state.city})
    return {"car": ref, "log": [f"car {ref} rented"]}
