"""The client's state machine alone: real Run states from the coordinator's host build (support.host_run) go
in, with peer messages, completions and time; the actions that come out are checked. No chain, no peers,
no model: every phase jump, epoch boundary, leave and rejoin, and what dishonest peers send."""

from __future__ import annotations

import pytest
from support.host_run import HostRun

from cohort.client.runtime.machine import (
    Allow,
    AnnounceReady,
    Applied,
    Apply,
    ApplyFailed,
    ChainUpdate,
    Check,
    Checked,
    ClientMachine,
    Emit,
    EpochPrepared,
    Fetch,
    FetchList,
    Finish,
    HealthCheck,
    Join,
    LeaveEpoch,
    ListHeld,
    PeerReady,
    PeerResult,
    PrepareEpoch,
    ReadRecords,
    RecordsRead,
    ReleaseState,
    ReportCheck,
    ReportEquivocation,
    ResultFailed,
    ResultHeld,
    RunClosed,
    SaveCheckpoint,
    Saved,
    ServeList,
    StopRequested,
    SubmitWitness,
    Tick,
    TimerFired,
    Timing,
    Train,
    Trained,
    TrainFailed,
    TxDone,
    VoteWeights,
    WarmupWitness,
)
from cohort.client.runtime.messages import Result
from cohort.client.runtime.options import ExitCode
from cohort.client.runtime.results_list import ResultsList
from cohort.client.runtime.rounds import observe, unhealthy
from cohort.sdk.coordinator_core import CoordinatorCore


@pytest.fixture(scope="module")
def core() -> CoordinatorCore:
    return CoordinatorCore()


def commitment(step: int, index: int, salt: int = 0) -> bytes:
    return bytes([step % 256, index, salt]) * 10 + b"cc"


def witness_landed(step: int) -> TxDone:
    """Our record for round `step` landed (the machine reads only the round's step of it)."""
    return TxDone(SubmitWitness(step, 0, 0, ResultsList.of(step - 1, {}), 0), True)


class Driver:
    """One machine (the client of epoch index `me` once members are in) and the host run it follows."""

    def __init__(self, core: CoordinatorCore, clients: int = 3, me: int = 0, **config) -> None:
        self.core, self.host = core, HostRun(core, clients, **config)
        self.me = me
        self.machine = ClientMachine(core, self.host.wallets[me], Timing(tick_turn=0.0))
        self.now = 100.0

    def feed(self, event=None, dt: float = 0.0) -> list:
        self.now += dt
        if event is None:
            event = ChainUpdate(observe(self.core, self.host.run(), self.host.wallets[self.me]))
        return self.machine.handle(event, self.now, self.host.now)

    def view(self):
        return observe(self.core, self.host.run(), self.host.wallets[self.me])

    def result(self, step: int, index: int, salt: int = 0) -> Result:
        batch = self.view().rounds[step].assignment[index]
        return Result(step, *batch, commitment(step, index, salt), 100, b"s" * 64)

    def hold_all(self, step: int) -> dict[int, bytes]:
        """Every trainer's result of `step` announced and held (ours trained)."""
        held = {}
        for index in self.view().rounds[step].assignment:
            c = commitment(step, index)
            if index != self.me:
                self.feed(PeerResult(index, self.result(step, index)))
            self.feed(ResultHeld(step, index, c))
            held[index] = c
        return held

    def step_1_decided(self) -> tuple[list, dict[int, bytes]]:
        """Started, our step 1 trained and everyone's held, round 1 attested nothing and round 2 decided step
        1 with every result: the actions of the update that saw it, and the results held."""
        self.start()
        self.feed(
            Trained(
                0, 1, self.view().rounds[1].assignment[0], commitment(1, 0), 100, 5.0, 1024, 0.5
            )
        )
        held = self.hold_all(1)
        self.host.decide(ResultsList.of(0, {}).root)
        self.host.start_pending()
        self.feed()
        self.host.decide(ResultsList.of(1, held).root)
        return self.feed(), held

    def past_the_first_round(self) -> list:
        """Started, and round 1 (which attests nothing) decided: round 2 runs."""
        self.start()
        self.host.decide(ResultsList.of(0, {}).root)
        self.host.start_pending()
        return self.feed()

    def start(self) -> list:
        """Join, warm up (prepared, everyone ready) and enter the epoch's first round."""
        self.host.to_warmup()
        self.feed()
        self.feed(EpochPrepared(0, True, digest=7))
        self.host.warm_up()
        return self.feed()


def of(actions: list, kind: type) -> list:
    return [a for a in actions if isinstance(a, kind)]


def emitted(actions: list, name: str) -> list:
    return [a for a in actions if isinstance(a, Emit) and a.event == name]


# -- membership and phases ------------------------------------------------------------------------------


def test_joins_once_in_waiting_for_members_and_again_after_a_failed_join(core):
    d = Driver(core)
    assert of(d.feed(), Join) == [Join()]
    assert of(d.feed(), Join) == []  # in flight: never asked twice
    assert of(d.feed(TxDone(Join(), False, "rpc")), Join) == []  # the retry waits its time
    assert of(d.feed(TimerFired(), dt=2.0), Join) == [Join()]
    assert of(d.feed(TxDone(Join(), False, "RunFull")), Finish) == [
        Finish(ExitCode.RUN_FULL, "cannot join: RunFull")
    ]


def test_warmup_prepares_the_weights_then_says_ready_on_a_timer_and_witnesses_once_all_are(core):
    d = Driver(core)
    d.host.to_warmup()
    assert of(d.feed(), PrepareEpoch) == [
        PrepareEpoch(0, "start")
    ]  # a new run: its own first weights
    assert of(d.feed(), PrepareEpoch) == []
    out = d.feed(EpochPrepared(0, True, digest=7))
    assert of(out, AnnounceReady) == [AnnounceReady(0)] and of(out, Allow)
    assert of(d.feed(TimerFired(), dt=0.5), AnnounceReady) == []  # a timer, not every wakeup
    assert of(d.feed(TimerFired(), dt=0.6), AnnounceReady) == [AnnounceReady(0)]
    # then twice as long each time, up to 10 s: a long Warmup stays far from the per-round gossip cap
    assert of(d.feed(TimerFired(), dt=1.5), AnnounceReady) == []
    sent = [bool(of(d.feed(TimerFired(), dt=0.5), AnnounceReady)) for _ in range(600)]  # 300 s more
    assert sent.index(True) == 0 and 20 <= sum(sent) <= 40
    assert of(d.feed(PeerReady(1, 0)), WarmupWitness) == []
    assert of(d.feed(PeerReady(2, 0)), WarmupWitness) == [WarmupWitness(0)]
    assert of(d.feed(PeerReady(2, 0)), WarmupWitness) == []


def test_a_failed_preparation_leaves_with_exit_run_first(core):
    d = Driver(core)
    d.host.to_warmup()
    d.feed()
    out = d.feed(EpochPrepared(0, False, reason="no checkpoint"))
    assert isinstance(out[1], LeaveEpoch) and out[1].epoch == 0 and emitted(out, "no_weights")


def test_trains_the_first_two_steps_back_to_back_without_a_chain_update(core):
    d = Driver(core)
    out = d.start()
    (train,) = of(out, Train)
    assert train.step == 1 and train.batch == d.view().rounds[1].assignment[0]
    out = d.feed(Trained(0, 1, train.batch, commitment(1, 0), 100, 5.0, 1024, 0.5))
    assert of(out, Train) == [
        Train(0, 2, d.view().rounds[2].assignment[0])
    ]  # round 2's batch: known ahead
    assert not d.view().rounds[2].stored
    out = d.feed(Trained(0, 2, (0, 1), commitment(2, 0), 100, 5.0, 1024, 0.5))
    assert of(out, Train) == []  # step 3 needs step 1 applied first
    assert d.machine.throughput() == 2048  # tokens/s our next join declares (it sizes our share)


def test_applies_exactly_the_decided_results_and_then_trains_on(core):
    d = Driver(core)
    d.start()
    d.feed(Trained(0, 1, d.view().rounds[1].assignment[0], commitment(1, 0), 100, 5.0, 1024, 0.5))
    held = d.hold_all(1)
    d.host.decide(ResultsList.of(0, {}).root)  # round 1 attests step 0: nothing
    d.host.start_pending()
    d.feed()
    d.host.decide(ResultsList.of(1, held).root)  # round 2 decides step 1: every result we hold
    out = d.feed()
    (apply,) = of(out, Apply)
    assert apply.step == 1 and apply.commitments == tuple(held[i] for i in sorted(held))
    d.feed(Trained(0, 2, (0, 1), commitment(2, 0), 100, 5.0, 1024, 0.5))
    out = d.feed(Applied(0, 1, 3, digest=7))
    assert of(out, Train) and of(out, Train)[0].step == 3


def test_rounds_that_start_in_the_instruction_that_decides_are_followed_alike(core):
    """On a real chain the deciding witness lands a slot or more after its round began and starts the next
    round itself: the machine sees round h, then round h+1, no state between; it trains and applies as
    when a tick started the round."""
    d = Driver(core)
    d.start()
    d.feed(Trained(0, 1, d.view().rounds[1].assignment[0], commitment(1, 0), 100, 5.0, 1024, 0.5))
    held = d.hold_all(1)
    for step, decided in ((1, ResultsList.of(0, {})), (2, ResultsList.of(1, held))):
        d.host.advance(0, 1)
        d.host.decide(decided.root)
        run = d.host.run()
        assert (
            run.progress.step == step + 1
            and run.state.value == "RoundTrain"
            and not run.seed_pending
        )
        out = d.feed()
        if step == 1:
            assert not of(out, Apply) and not of(out, LeaveEpoch)
    assert [(a.step, a.commitments) for a in of(out, Apply)] == [
        (1, tuple(held[i] for i in sorted(held)))
    ]


def test_a_lagging_trainer_applies_a_step_only_after_the_next_one_went_to_the_worker(core):
    """Step s trains on exactly the weights after s - 2 on every replica (what a verifier replays from):
    a replica still training s - 1 when s - 1 is decided waits with that apply until step s is sent."""
    d = Driver(core)
    out, held = d.step_1_decided()
    assert [a.step for a in of(out, Apply)] == [1]  # step 2 is training already: 1 may go
    d.feed(Applied(0, 1, len(held), digest=7))
    held = d.hold_all(
        2
    )  # everyone's step 2 is in, ours included; our training of step 2 still runs
    d.host.start_pending()
    d.feed()
    d.host.decide(ResultsList.of(2, held).root)
    assert not of(d.feed(), Apply)  # applying 2 now would move the weights step 3 must train on
    out = d.feed(
        Trained(0, 2, d.view().rounds[2].assignment[0], commitment(2, 0), 100, 5.0, 1024, 0.5)
    )
    kinds = [type(a) for a in out if isinstance(a, (Train, Apply))]
    assert kinds == [Train, Apply] and of(out, Train)[0].step == 3 and of(out, Apply)[0].step == 2


def test_a_deeper_pipeline_trains_further_ahead_and_applies_only_behind_it(core):
    """pipeline_depth 3: step s trains on the weights after s - 3, so step 3 trains before step 1 is even
    decided, step 1 is applied only once step 3 went to the worker, and step 4 waits for that apply."""
    d = Driver(core, pipeline_depth=3)
    d.start()
    d.feed(Trained(0, 1, d.view().rounds[1].assignment[0], commitment(1, 0), 100, 5.0, 1024, 0.5))
    held = d.hold_all(1)
    d.host.decide(ResultsList.of(0, {}).root)  # round 1 attests step 0
    d.host.start_pending()
    d.feed()  # round 2 runs: step 3's batch is known
    out = d.feed(
        Trained(0, 2, d.view().rounds[2].assignment[0], commitment(2, 0), 100, 5.0, 1024, 0.5)
    )
    assert of(out, Train) == [
        Train(0, 3, d.view().rounds[3].assignment[0])
    ]  # with depth 2 it waits for step 1
    d.host.decide(ResultsList.of(1, held).root)
    out = d.feed()
    assert [a.step for a in of(out, Apply)] == [
        1
    ]  # step 3 is in the worker: step 1 may move the weights
    out = d.feed(
        Trained(0, 3, d.view().rounds[3].assignment[0], commitment(3, 0), 100, 5.0, 1024, 0.5)
    )
    assert not of(out, Train)  # step 4 trains on the weights after step 1: not applied yet
    d.host.start_pending()
    d.feed()
    out = d.feed(Applied(0, 1, len(held), digest=9))
    assert [a.step for a in of(out, Train)] == [4]


def test_with_depth_3_a_step_is_not_applied_before_the_step_two_ahead_went_to_the_worker(core):
    d = Driver(core, pipeline_depth=3)
    d.start()
    d.feed(Trained(0, 1, d.view().rounds[1].assignment[0], commitment(1, 0), 100, 5.0, 1024, 0.5))
    held = d.hold_all(1)  # we train step 2 now, and step 3's batch is not known yet
    d.host.decide(ResultsList.of(0, {}).root)
    d.host.start_pending()
    d.feed()
    d.host.decide(ResultsList.of(1, held).root)
    assert not of(d.feed(), Apply)  # step 3 trains on the weights before step 1: it goes first
    out = d.feed(
        Trained(0, 2, d.view().rounds[2].assignment[0], commitment(2, 0), 100, 5.0, 1024, 0.5)
    )
    kinds = [(type(a).__name__, a.step) for a in out if isinstance(a, (Train, Apply))]
    assert kinds == [("Train", 3), ("Apply", 1)]


def test_a_decided_list_other_than_ours_is_fetched_and_only_it_is_applied(core):
    d = Driver(core)
    d.start()
    d.feed(Trained(0, 1, d.view().rounds[1].assignment[0], commitment(1, 0), 100, 5.0, 1024, 0.5))
    d.hold_all(1)
    d.host.decide(ResultsList.of(0, {}).root)
    d.host.start_pending()
    d.feed()
    decided = ResultsList.of(
        1, {1: commitment(1, 1), 2: commitment(1, 2, salt=9)}
    )  # not what we hold
    d.host.decide(decided.root)
    out = d.feed()
    (ask,) = of(out, FetchList)
    assert ask.root == decided.root and not of(out, Apply)
    out = d.feed(ListHeld(1, decided.root, decided))
    assert [(f.sender, f.commitment) for f in of(out, Fetch)] == [(2, commitment(1, 2, salt=9))]
    out = d.feed(ResultHeld(1, 2, commitment(1, 2, salt=9)))
    (apply,) = of(out, Apply)
    assert apply.commitments == (commitment(1, 1), commitment(1, 2, salt=9))


def test_a_replica_that_is_no_seat_serves_the_decided_list_it_holds(core):
    """Peers ask every member for a decided list: a replica whose held results make up the decided list
    (it is no seat, and fetched nothing) serves it, once, and applies it."""
    probe = Driver(core, clients=5)
    probe.past_the_first_round()
    me = next(
        i for i in range(5) if i not in probe.host.seats()
    )  # no seat in round 2, which decides step 1
    d = Driver(core, clients=5, me=me)
    d.start()
    mine = d.view().rounds[1].assignment[me]
    d.feed(Trained(0, 1, mine, commitment(1, me), 100, 5.0, 1024, 0.5))
    held = d.hold_all(1)
    d.host.decide(ResultsList.of(0, {}).root)
    d.host.start_pending()
    out = d.feed()
    assert me not in d.host.seats() and not of(out, SubmitWitness)
    decided = ResultsList.of(1, held)
    d.host.decide(decided.root)
    out = d.feed()
    assert of(out, ServeList) == [ServeList(decided)] and not of(out, FetchList)
    assert (
        of(out, Apply) or d.machine.applying is None
    )  # applied now, or after the step the pipeline trains
    assert not of(d.feed(), ServeList)  # once


def test_a_step_its_round_did_not_decide_applies_nothing_everywhere(core):
    d = Driver(core)
    d.past_the_first_round()
    config = d.host.run().config
    for k, index in enumerate(
        list(d.host.seats())[:2]
    ):  # two seats, two different roots: no majority
        assert d.host.witness(index, bytes([k + 1]) * 32) == 0
    d.host.advance(config.max_round_train_time)
    assert d.host.tick() == 0  # training time is up: RoundWitness
    d.host.advance(config.round_witness_time)
    assert (
        d.host.tick() == 0
    )  # the witness time too: the round ends undecided, the next starts at once
    out = d.feed()
    assert d.host.run().progress.step == 3 and not d.host.run().seed_pending
    assert [a.fields for a in emitted(out, "applied")] == [
        {"step": 1, "results": 0, "decided": False}
    ]
    assert not of(out, Apply) and not of(out, FetchList)


# -- witnessing ----------------------------------------------------------------------------------------


def seated_driver(core, round_step: int = 2) -> Driver:
    """A driver whose client holds a seat in round `round_step` (the witnesses of step round_step - 1);
    the rounds before it decided nothing."""
    for attempt in range(60):
        d = Driver(core, clients=5, me=attempt % 5, witness_nodes=3)
        d.start()
        for step in range(1, round_step):
            d.host.decide(ResultsList.of(step - 1, {}).root)
            d.host.start_pending()
            d.feed(witness_landed(step))  # any record of ours landed
        if d.me in d.host.seats():
            d.feed()
            return d
    raise AssertionError("no seat found")


def test_a_seat_waits_for_every_expected_result_then_witnesses(core):
    d = seated_driver(core)
    d.feed(Applied(0, 0, 0, 7))
    assignment = d.view().rounds[1].assignment
    others = [i for i in assignment if i != d.me]
    for index in others[:-1]:
        d.feed(PeerResult(index, d.result(1, index)))
        assert not of(d.feed(ResultHeld(1, index, commitment(1, index))), SubmitWitness)
    d.feed(ResultHeld(1, d.me, commitment(1, d.me)))
    last = others[-1]
    d.feed(PeerResult(last, d.result(1, last)))
    (submitted,) = of(d.feed(ResultHeld(1, last, commitment(1, last))), SubmitWitness)
    assert submitted.step == 2 and submitted.results.indices == tuple(sorted(assignment))
    assert submitted.position == d.host.seats()[d.me] and submitted.weights_digest == 7


def test_a_withheld_result_costs_a_bounded_grace_then_the_seat_witnesses_without_it(core):
    d = seated_driver(
        core, round_step=3
    )  # step 2: not the epoch's first, which is waited for longer
    assignment = d.view().rounds[2].assignment
    withheld = next(i for i in assignment if i != d.me)
    for index in assignment:
        if index != withheld:
            d.feed(ResultHeld(2, index, commitment(2, index)))
    assert not of(d.feed(TimerFired(), dt=0.5), SubmitWitness)
    grace = Timing.witness_grace(d.host.run().config.max_round_train_time)
    out = d.feed(TimerFired(), dt=grace)
    (submitted,) = of(out, SubmitWitness)
    assert withheld not in submitted.results.indices
    assert [e.fields["missing"] for e in emitted(out, "witness_short")] == [
        {withheld: "not announced"}
    ]  # says why
    # the result arrives late: the record is replaced (an undecided round), at most once a second
    d.feed(witness_landed(3))
    d.feed(PeerResult(withheld, d.result(2, withheld)))
    assert not of(d.feed(ResultHeld(2, withheld, commitment(2, withheld))), SubmitWitness)
    (again,) = of(d.feed(TimerFired(), dt=1.1), SubmitWitness)
    assert withheld in again.results.indices


def hold_all_but(d, step: int, absent: int) -> None:
    """Every result of `step` announced and held but `absent`'s (ours held as we trained it)."""
    for index in d.view().rounds[step].assignment:
        if index != absent:
            if index != d.me:
                d.feed(PeerResult(index, d.result(step, index)))
            d.feed(ResultHeld(step, index, commitment(step, index)))


def test_a_result_announced_at_once_and_served_late_costs_its_serve_time_not_the_training_time(
    core,
):
    """A trainer that announces at once and serves just before seats give up (measured: every round lasted
    about T) is late once its serve time from the announcement is over: the seat leaves it out then,
    reports it late, and does not wait the silent grace, let alone T."""
    d = seated_driver(core, round_step=3)
    config = d.host.run().config
    assignment = d.view().rounds[2].assignment
    late = next(i for i in assignment if i != d.me)
    d.feed(PeerResult(late, d.result(2, late)))  # size 100: served in about a second
    hold_all_but(d, 2, late)
    serve = d.machine.timing.serve_time(100)
    grace = Timing.witness_grace(config.max_round_train_time)
    assert serve < grace < config.max_round_train_time
    assert not of(d.feed(TimerFired(), dt=serve - 0.1), SubmitWitness)
    out = d.feed(TimerFired(), dt=0.2)
    (submitted,) = of(out, SubmitWitness)
    assert late not in submitted.results.indices
    assert [(e.fields["step"], e.fields["trainer"]) for e in emitted(out, "late_result")] == [
        (2, late)
    ]
    assert [e.fields["missing"] for e in emitted(out, "witness_short")] == [{late: "late"}]
    # reported once: a record replaced later does not report it again
    d.feed(witness_landed(3))
    assert not emitted(d.feed(TimerFired(), dt=1.5), "late_result")


def test_a_result_waiting_behind_its_trainers_previous_fetch_gets_its_serve_time_from_when_it_is_asked(
    core,
):
    """We fetch one result per trainer at a time: at an epoch's start a trainer's first two results come
    together, and the second's fetch starts only when the first's ends (over a 240 ms path, ~1.5 s each). Its
    serve time runs from then, not from its announcement (an honest member was dropped as late so); the seat's
    cap of ANNOUNCED_GRACES graces after the majority still bounds the wait."""
    d = seated_driver(core, round_step=3)
    config = d.host.run().config
    assignment = d.view().rounds[2].assignment
    queued = next(i for i in assignment if i != d.me)
    d.machine.fetching[b"p" * 32] = queued  # our fetch of its previous result still runs
    d.feed(PeerResult(queued, d.result(2, queued)))
    hold_all_but(d, 2, queued)
    serve = d.machine.timing.serve_time(100)
    grace = Timing.witness_grace(config.max_round_train_time)
    assert not of(d.feed(TimerFired(), dt=serve + 0.5), SubmitWitness)  # not asked yet: not late
    del d.machine.fetching[b"p" * 32]  # the previous one came: this one is asked now
    assert of(d.feed(TimerFired(), dt=0.01), Fetch)
    assert not of(d.feed(TimerFired(), dt=serve - 0.1), SubmitWitness)
    out = d.feed(TimerFired(), dt=0.2)
    (submitted,) = of(out, SubmitWitness)
    assert queued not in submitted.results.indices and emitted(out, "late_result")
    assert serve + 0.5 + serve < grace * Timing.ANNOUNCED_GRACES  # (the cap did not decide it)


def test_an_announced_result_gets_the_time_its_size_takes_but_no_more_than_the_largest_held(core):
    """A large honest result is not a withheld one: it is waited for the time its bytes take at the rate every
    member serves at. A size announced larger than any result of the step we hold buys no more time."""
    d = seated_driver(core, round_step=3)
    config = d.host.run().config
    assignment = d.view().rounds[2].assignment
    slow = next(i for i in assignment if i != d.me)
    size = 256 << 10  # two seconds at the serve rate, over two hops
    batch = d.view().rounds[2].assignment[slow]
    d.feed(
        PeerResult(slow, Result(2, *batch, commitment(2, slow), 64 * size, b"s" * 64))
    )  # claims 64x
    for index in assignment:
        if index != slow:
            if index != d.me:
                b = d.view().rounds[2].assignment[index]
                d.feed(PeerResult(index, Result(2, *b, commitment(2, index), size, b"s" * 64)))
            d.feed(ResultHeld(2, index, commitment(2, index)))
    serve = d.machine.timing.serve_time(size)
    cap = Timing.witness_grace(config.max_round_train_time) * Timing.ANNOUNCED_GRACES
    assert serve < cap
    assert not of(d.feed(TimerFired(), dt=serve - 0.1), SubmitWitness)
    out = d.feed(TimerFired(), dt=0.2)
    (submitted,) = of(out, SubmitWitness)
    assert slow not in submitted.results.indices and emitted(out, "late_result")


def test_the_epochs_first_step_is_waited_for_until_the_training_time_is_up(core):
    d = seated_driver(core)
    assignment = d.view().rounds[1].assignment
    slow = next(i for i in assignment if i != d.me)
    for index in assignment:
        if index != slow:
            d.feed(ResultHeld(1, index, commitment(1, index)))
    grace = Timing.witness_grace(d.host.run().config.max_round_train_time)
    assert not of(d.feed(TimerFired(), dt=grace + 1), SubmitWitness)


def test_an_equivocating_trainer_is_reported_and_never_attested(core):
    d = seated_driver(core)
    liar = next(i for i in d.view().rounds[1].assignment if i != d.me)
    first, second = d.result(1, liar), d.result(1, liar, salt=1)
    assert not of(d.feed(PeerResult(liar, first)), ReportEquivocation)
    d.feed(ResultHeld(1, liar, first.commitment))
    (report,) = of(d.feed(PeerResult(liar, second)), ReportEquivocation)
    assert report.index == liar and {report.first.commitment, report.second.commitment} == {
        first.commitment,
        second.commitment,
    }
    out = []
    for index in d.view().rounds[1].assignment:
        if index != liar:
            out += d.feed(ResultHeld(1, index, commitment(1, index)))
    (submitted,) = of(out, SubmitWitness)  # all the others are in: no wait for the excluded one
    assert liar not in submitted.results.indices


def test_a_convicted_trainer_is_never_attested_even_by_a_seat_that_saw_one_statement(core):
    """A twin is convicted on another member's report before its second statement reaches this seat (the
    gossip from a member no longer healthy is dropped): the seat holds one valid result of it and no proof.
    It leaves the trainer out all the same, as the seats that saw both statements do, so their roots agree."""
    d = seated_driver(core)
    liar = next(i for i in d.view().rounds[1].assignment if i != d.me)
    d.feed(PeerResult(liar, d.result(1, liar)))
    d.feed(ResultHeld(1, liar, commitment(1, liar)))
    assert d.host.do("convict", liar, 0, 1) == 0  # equivocation, reported by another member
    d.feed()
    out = []
    for index in d.view().rounds[1].assignment:
        if index != liar:
            if index != d.me:
                d.feed(PeerResult(index, d.result(1, index)))
            out += d.feed(ResultHeld(1, index, commitment(1, index)))
    (submitted,) = of(out, SubmitWitness)
    assert liar not in submitted.results.indices
    assert len(submitted.results.entries) == len(d.view().rounds[1].assignment) - 1


def test_results_outside_the_window_or_for_another_batch_are_refused(core):
    d = seated_driver(core)
    index = next(i for i in d.view().rounds[1].assignment if i != d.me)
    good = d.result(1, index)
    wrong_batch = Result(1, good.batch_start, good.batch_end + 1, good.commitment, 100, b"s" * 64)
    assert emitted(d.feed(PeerResult(index, wrong_batch)), "bad_message")
    far = Result(9, 0, 1, good.commitment, 100, b"s" * 64)
    assert emitted(d.feed(PeerResult(index, far)), "bad_message")
    assert not of(d.feed(TimerFired()), Fetch)  # neither was taken up


def test_a_failed_payload_is_not_fetched_again_and_one_fetch_runs_per_trainer(core):
    d = seated_driver(core)
    index = next(i for i in d.view().rounds[1].assignment if i != d.me)
    fetches = of(d.feed(PeerResult(index, d.result(1, index))), Fetch)
    assert [f.sender for f in fetches] == [index]
    assert not of(
        d.feed(
            PeerResult(index, d.result(2, index) if 2 in d.view().rounds else d.result(1, index))
        ),
        Fetch,
    )
    out = d.feed(ResultFailed(1, index, commitment(1, index), True, "payload of 1 bytes"))
    assert emitted(out, "bad_result")
    assert not [
        f for f in of(d.feed(TimerFired(), dt=5), Fetch) if f.step == 1 and f.sender == index
    ]


# -- copies and twins: a result is judged per (trainer, commitment) ------------------------------------


COPY = "the same payload as a result for another step or batch (a copy)"  # the exchange's verdict


def test_a_byte_for_byte_copy_is_refused_for_its_copier_and_never_for_the_original(core):
    """A copier re-announces another trainer's commitment under its own batch, before the original reaches
    us: the payload names the original's batch, so the fetch refuses it for the copier alone; the seat
    attests the original, does not wait for the copier, and says why it is missing."""
    d = seated_driver(core)
    assignment = d.view().rounds[1].assignment
    original, copier = [i for i in assignment if i != d.me][:2]
    copied = commitment(1, original)
    out = d.feed(PeerResult(copier, Result(1, *assignment[copier], copied, 100, b"s" * 64)))
    out += d.feed(PeerResult(original, d.result(1, original)))
    assert [e.fields for e in emitted(out, "duplicate_commitment")] == [
        {"step": 1, "trainers": [copier, original]}
    ]
    out = []
    for index in assignment:
        if index != copier:
            out += d.feed(ResultHeld(1, index, commitment(1, index)))
    assert not of(out, SubmitWitness)  # the copier's verdict is not in yet
    out = d.feed(ResultFailed(1, copier, copied, True, COPY))
    (submitted,) = of(out, SubmitWitness)  # no grace waited for a result it cannot give
    assert submitted.results.entries == tuple(
        (i, commitment(1, i)) for i in sorted(assignment) if i != copier
    )
    assert not [
        f for f in of(d.feed(TimerFired(), dt=5), Fetch) if f.sender == copier
    ]  # never asked again


def test_a_commitment_two_trainers_announced_is_fetched_from_its_announcer_last(core):
    d = seated_driver(core)
    assignment = d.view().rounds[1].assignment
    original, copier = [i for i in assignment if i != d.me][:2]
    fetches = of(d.feed(PeerResult(original, d.result(1, original))), Fetch)
    assert [(f.sender, f.decided) for f in fetches] == [
        (original, False)
    ]  # only its trainer holds it yet
    d.feed(
        PeerResult(copier, Result(1, *assignment[copier], commitment(1, original), 100, b"s" * 64))
    )
    d.feed(ResultFailed(1, original, commitment(1, original), False, "busy"))
    fetches = of(d.feed(TimerFired(), dt=1), Fetch)
    assert {(f.sender, f.decided) for f in fetches} == {(original, True)}  # other holders first


def test_one_commitment_held_for_two_trainers_is_attested_for_neither(core):
    """Should both pass the batch check (identical batches), no order of arrival picks the author: a list
    never holds one commitment twice, and every seat leaves both out alike."""
    d = seated_driver(core)
    assignment = d.view().rounds[1].assignment
    a, b = [i for i in assignment if i != d.me][:2]
    out = []
    for index in assignment:
        out += d.feed(ResultHeld(1, index, commitment(1, a if index == b else index)))
    (submitted,) = of(out, SubmitWitness)
    assert a not in submitted.results.indices and b not in submitted.results.indices
    assert len(set(submitted.results.commitments)) == len(submitted.results.entries)
    assert [e.fields for e in emitted(out, "duplicate_commitment")] == [
        {"step": 1, "trainers": [a, b], "held": True}
    ]


def test_a_decided_list_that_names_one_commitment_twice_applies_it_once(core):
    """A copy that slipped past the seats: the replica applies each decided result once (the same on every
    replica), neither fetching the copier's entry nor leaving for it."""
    d = Driver(core)
    d.start()
    d.feed(Trained(0, 1, d.view().rounds[1].assignment[0], commitment(1, 0), 100, 5.0, 1024, 0.5))
    d.feed(PeerResult(1, d.result(1, 1)))
    d.feed(ResultHeld(1, 1, commitment(1, 1)))
    d.feed(
        PeerResult(
            2, Result(1, *d.view().rounds[1].assignment[2], commitment(1, 1), 100, b"s" * 64)
        )
    )
    d.feed(ResultFailed(1, 2, commitment(1, 1), True, COPY))
    d.host.decide(ResultsList.of(0, {}).root)
    d.host.start_pending()
    d.feed()
    decided = ResultsList.of(1, {0: commitment(1, 0), 1: commitment(1, 1), 2: commitment(1, 1)})
    d.host.decide(decided.root)
    (ask,) = of(d.feed(), FetchList)
    out = d.feed(ListHeld(1, ask.root, decided))
    (apply,) = of(out, Apply)
    assert apply.commitments == (commitment(1, 0), commitment(1, 1))
    assert not of(out, Fetch) and not of(out, LeaveEpoch)


@pytest.mark.parametrize("verdict_first", [True, False])
def test_the_decided_valid_twin_is_fetched_once_and_applied_after_an_invalid_twin(
    core, verdict_first
):
    """A trainer signs an invalid A and a valid B for one step; we saw A first, the seats decided B. A's
    verdict (before or after the decision) bars A alone: B is fetched once, applied, and we stay."""
    d = Driver(core)
    d.start()
    d.feed(Trained(0, 1, d.view().rounds[1].assignment[0], commitment(1, 0), 100, 5.0, 1024, 0.5))
    d.feed(PeerResult(2, d.result(1, 2)))
    d.feed(ResultHeld(1, 2, commitment(1, 2)))
    a, b = d.result(1, 1), d.result(1, 1, salt=1)
    assert [f.commitment for f in of(d.feed(PeerResult(1, a)), Fetch)] == [a.commitment]
    if verdict_first:
        assert emitted(
            d.feed(ResultFailed(1, 1, a.commitment, True, "not a result of this model")),
            "bad_result",
        )
    assert of(d.feed(PeerResult(1, b)), ReportEquivocation)
    d.host.decide(ResultsList.of(0, {}).root)
    d.host.start_pending()
    d.feed()
    decided = ResultsList.of(1, {0: commitment(1, 0), 1: b.commitment, 2: commitment(1, 2)})
    d.host.decide(decided.root)
    (ask,) = of(d.feed(), FetchList)
    out = d.feed(ListHeld(1, ask.root, decided))
    if not verdict_first:
        assert not of(out, Fetch)  # A's fetch still runs: one fetch per trainer
        out = d.feed(ResultFailed(1, 1, a.commitment, True, "not a result of this model"))
    fetches = of(out, Fetch)
    for _ in range(20):
        fetches += of(d.feed(TimerFired(), dt=0.5), Fetch)
    assert [(f.sender, f.commitment, f.decided) for f in fetches] == [(1, b.commitment, True)]
    out = d.feed(ResultHeld(1, 1, b.commitment))
    (apply,) = of(out, Apply)
    assert b.commitment in apply.commitments and a.commitment not in apply.commitments
    assert not of(out, LeaveEpoch)


def test_a_decided_result_that_is_invalid_here_makes_the_replica_leave(core):
    """The other side of per-(trainer, commitment) validity: the pair the seats decided is invalid."""
    d = Driver(core)
    d.start()
    d.feed(Trained(0, 1, d.view().rounds[1].assignment[0], commitment(1, 0), 100, 5.0, 1024, 0.5))
    d.feed(PeerResult(1, d.result(1, 1)))
    d.host.decide(ResultsList.of(0, {}).root)
    d.host.start_pending()
    d.feed()
    decided = ResultsList.of(1, {0: commitment(1, 0), 1: commitment(1, 1)})
    d.host.decide(decided.root)
    d.feed()
    d.feed(ListHeld(1, decided.root, decided))
    out = d.feed(ResultFailed(1, 1, commitment(1, 1), True, "not a result of this model"))
    assert of(out, LeaveEpoch) and not of(out, Apply)


def test_seats_given_different_valid_twins_converge_once_both_statements_are_known(core):
    """A trainer gives each seat a different valid twin: their first records differ, so no root has a
    majority; once each holds both statements (gossip lets an origin's two statements through every quota)
    each seat replaces its record leaving the trainer out, the roots agree and the step is decided."""
    host = HostRun(core, 5, witness_nodes=3)
    machines = [ClientMachine(core, w, Timing(tick_turn=0.0)) for w in host.wallets]
    now = 100.0

    def feed(index: int, event=None) -> list:
        event = event or ChainUpdate(observe(core, host.run(), host.wallets[index]))
        return machines[index].handle(event, now, host.now)

    host.to_warmup()
    for i in range(5):
        feed(i)
        feed(i, EpochPrepared(0, True, digest=7))
    host.warm_up()
    host.decide(ResultsList.of(0, {}).root)  # round 1 attests nothing
    host.start_pending()
    for i in range(5):
        feed(i, witness_landed(1))
        feed(i)
    view = observe(core, host.run(), host.wallets[0])
    assignment = view.rounds[1].assignment
    first, second = list(host.seats())[:2]
    liar = next(i for i in assignment if i not in (first, second))
    twins = {
        k: Result(1, *assignment[liar], commitment(1, liar, salt=k), 100, b"s" * 64) for k in (0, 1)
    }
    records = {}
    for seat, k in (
        (first, 0),
        (second, 1),
    ):  # each seat is given one twin, and everyone else's result
        feed(seat, PeerResult(liar, twins[k]))
        out = []
        for index in assignment:
            if index != seat and index != liar:
                feed(
                    seat,
                    PeerResult(
                        index, Result(1, *assignment[index], commitment(1, index), 100, b"s" * 64)
                    ),
                )
            c = twins[k].commitment if index == liar else commitment(1, index)
            out += feed(seat, ResultHeld(1, index, c))
        (records[seat],) = of(out, SubmitWitness)
        feed(seat, witness_landed(2))
    assert records[first].results.root != records[second].results.root  # split: no majority
    now += 1.1
    for seat, k in ((first, 1), (second, 0)):  # the other twin arrives
        out = feed(seat, PeerResult(liar, twins[k]))
        assert of(out, ReportEquivocation)
        (records[seat],) = of(out, SubmitWitness)
    assert records[first].results.root == records[second].results.root
    assert (
        liar not in records[first].results.indices
        and len(records[first].results.entries) == len(assignment) - 1
    )
    for seat in (first, second):
        assert host.witness(seat, records[seat].results.root) == 0
    attesting = observe(core, host.run(), host.wallets[0]).rounds[2]
    assert attesting.decided and attesting.decided_root == records[first].results.root


def test_a_seat_of_the_previous_round_reports_whom_a_majority_left_out_naming_the_step(core):
    d = seated_driver(core)
    d.feed(Applied(0, 0, 0, 7))
    assignment = d.view().rounds[1].assignment
    out = []
    for index in assignment:
        out += d.feed(ResultHeld(1, index, commitment(1, index)))
    assert of(out, SubmitWitness)
    d.feed(witness_landed(2))
    lazy = next(i for i in assignment if i != d.me)
    seen = bytearray(b"\xff" * 32)
    seen[lazy // 8] &= ~(1 << (lazy % 8))
    quorum = core.quorum(3)
    for index in list(d.host.seats())[:quorum]:
        assert d.host.witness(index, b"\x09" * 32, participants=bytes(seen)) == 0
    d.host.start_pending()
    out = d.feed()
    (read,) = of(out, ReadRecords) or [None]
    if read is not None:  # a hot-prefix view: the records are read on request
        records = d.host.run().rounds[1].records
        out = d.feed(RecordsRead(read.step, records))
    assert of(out, HealthCheck) == [
        HealthCheck(1, (lazy,))
    ]  # step 1's trainers, attested by round 2's seats
    # the report names the step it is about: landing after another round started, it still reads round 2's
    # records (the round now before the current one saw everyone) and drops the trainer
    (report,) = of(out, HealthCheck)
    d.host.decide(b"\x0a" * 32)
    d.host.start_pending()
    run = d.host.run()
    assert run.progress.step == 4
    args = {"step": report.step, "count": 1, "indices": [lazy] + [0] * 31}
    assert d.host.do("health_check", run.clients[d.me].signer, args) == 0
    assert d.host.run().clients[lazy].state == "Dropped"


def test_the_health_rule_the_client_applies_is_the_chains_decided_set(core):
    """Seat b missed trainer t (another root); seat c votes the honest root but leaves t out; seat a holds
    everything. c's vote is not a's (a root counts with its bitmap): nothing is decided while b's record
    and c's leave t out; then b fetches t and votes with a. The decision's bitmap holds t, so the client
    reports nobody, and the chain agrees (it refuses t)."""
    host = HostRun(core, 5)
    host.to_warmup()
    host.warm_up()
    host.decide(b"\x01" * 32)  # round 1 (attests nothing)
    host.start_pending()
    (b, c, a) = list(host.seats())
    t = next(i for i in range(5) if i not in (a, b, c))
    without = bytearray(b"\xff" * 32)
    without[t // 8] &= ~(1 << (t % 8))
    honest, partial = b"\x0a" * 32, b"\x0b" * 32
    assert host.witness(b, partial, participants=bytes(without)) == 0
    assert host.witness(c, honest, participants=bytes(without)) == 0
    assert host.witness(a, honest) == 0  # not the same vote as c's: no decision yet
    assert not host.run().seed_pending and host.run().progress.step == 2
    assert host.witness(b, honest) == 0  # decided: the honest root with every trainer
    host.start_pending()
    run = host.run()
    view = observe(core, run, host.wallets[0])
    assert view.rounds[2].decided
    records = run.rounds[1].records
    assert [r.index for r in records if not r.saw(t)] == [c]
    assert unhealthy(view, 1, records) == []
    args = {"step": 1, "count": 1, "indices": [t] + [0] * 31}
    code = host.do("health_check", run.clients[a].signer, args)
    assert core.idl.error(code).name == "InvalidHealthCheck"


# -- leaving, drift, epoch end ----------------------------------------------------------------------------


def test_a_dropped_client_leaves_with_exit_run_first_and_joins_the_next_epoch(core):
    d = Driver(core)
    d.start()
    run = d.host.run()
    assert (
        core.exit(d.host.state, d.host.env(), run.clients[0].signer) == 0
    )  # as the chain would drop it
    out = d.feed()
    assert isinstance(out[0], LeaveEpoch) and out[0].epoch == 0
    assert emitted(out, "left_epoch")
    assert not of(d.feed(TimerFired()), Train)


def test_weights_that_differ_from_the_majority_digest_make_the_client_leave(core):
    d = Driver(core)
    d.start()
    d.host.decide(
        ResultsList.of(0, {}).root, digest=99
    )  # the majority reports other starting weights
    out = d.feed()
    assert emitted(out, "replica_drift") and of(out, LeaveEpoch)


def test_a_failed_apply_leaves_the_epoch(core):
    """Weights half through an apply are nobody's: the client leaves rather than wait for an Applied."""
    d = Driver(core)
    out, _ = d.step_1_decided()
    (apply,) = of(out, Apply)
    out = d.feed(ApplyFailed(0, apply.step, "RuntimeError: a rank is gone"))
    assert of(out, LeaveEpoch) and emitted(out, "left_epoch")


def test_matching_digests_keep_the_client_in(core):
    d = Driver(core)
    d.start()
    d.host.decide(ResultsList.of(0, {}).root, digest=7)
    assert not of(d.feed(), LeaveEpoch)


def test_cooldown_applies_everything_decided_then_saves_and_votes(core):
    d = Driver(core)
    d.past_the_first_round()
    d.host.advance(d.host.run().config.epoch_time)  # the epoch runs out during round 2
    d.host.decide(ResultsList.of(1, {}).root)  # round 2 ends: last_step set, round 3 is the flush
    d.host.start_pending()
    d.feed()
    out = d.feed(TrainFailed(0, 1, "aborted"))  # step 1's training failed: step 2 is trained next
    (train,) = of(out, Train)
    d.host.decide(ResultsList.of(2, {}).root)
    assert not of(d.feed(), SaveCheckpoint)  # the model is still busy
    out = d.feed(Trained(0, 2, train.batch, commitment(2, 0), 100, 5.0, 1024, 0.5))
    assert d.host.run().state == "Cooldown"
    assert of(out, SaveCheckpoint) == [SaveCheckpoint(0, d.host.run().progress.step)]
    out = d.feed(Saved(0, d.host.run().progress.step, b"\x07" * 32, "abc"))
    assert emitted(out, "epoch_end") and of(out, VoteWeights) == [
        VoteWeights(0, d.host.run().progress.step, b"\x07" * 32)
    ]


def training_the_epochs_last_step(d: Driver) -> Train:
    """The epoch ran out during round 2: round 3 is the flush, and we train step 2 (step 1's failed)."""
    d.past_the_first_round()
    d.host.advance(d.host.run().config.epoch_time)
    d.host.decide(ResultsList.of(1, {}).root)
    d.host.start_pending()
    d.feed()
    (train,) = of(d.feed(TrainFailed(0, 1, "aborted")), Train)
    return train


def finishes_late(d: Driver, train: Train) -> None:
    """Our training of the epoch's last step completes after its Cooldown: it is applied, saved and voted."""
    out = d.feed(Trained(0, 2, train.batch, commitment(2, 0), 100, 5.0, 1024, 0.5))
    step = d.host.run().progress.step
    assert of(out, SaveCheckpoint) == [SaveCheckpoint(0, step)]
    out = d.feed(Saved(0, step, b"\x07" * 32, "abc"))
    assert emitted(out, "epoch_end") and of(out, VoteWeights) == [
        VoteWeights(0, step, b"\x07" * 32)
    ]


def test_a_cooldown_that_ends_before_our_last_apply_is_finished_late_then_voted(core):
    d = Driver(core)
    train = training_the_epochs_last_step(d)
    d.host.decide(ResultsList.of(2, {}).root)
    assert d.host.run().state == "Cooldown" and not of(
        d.feed(), SaveCheckpoint
    )  # still training step 2
    d.host.advance(d.host.run().config.cooldown_time + 1)
    d.host.tick()
    assert d.host.run().state == "WaitingForMembers"
    out = d.feed()
    assert not emitted(out, "left_epoch") and not of(
        out, LeaveEpoch
    )  # what was decided is final: finish it
    finishes_late(d, train)


def test_a_cooldown_we_never_saw_is_finished_late_from_the_waiting_state_after_it(core):
    """A far client behind a slow RPC can miss a short Cooldown altogether: until the next Warmup the chain
    keeps the ended epoch's rounds, so the WaitingForMembers state is enough to finish it."""
    d = Driver(core)
    train = training_the_epochs_last_step(d)
    d.host.decide(ResultsList.of(2, {}).root)  # Cooldown starts and ends unseen
    d.host.advance(d.host.run().config.cooldown_time + 1)
    d.host.tick()
    assert d.host.run().state == "WaitingForMembers"
    out = d.feed()
    assert not emitted(out, "left_epoch") and not of(out, LeaveEpoch)
    finishes_late(d, train)


def test_an_epoch_whose_end_we_never_saw_before_the_next_warmup_is_left(core):
    d = Driver(core)
    d.past_the_first_round()
    d.host.advance(d.host.run().config.epoch_time)
    d.host.decide(ResultsList.of(1, {}).root)
    d.host.start_pending()
    d.feed()
    d.host.decide(ResultsList.of(2, {}).root)
    d.host.advance(d.host.run().config.cooldown_time + 1)
    d.host.tick()
    d.host.to_warmup()  # the next epoch's Warmup cleared the ended epoch's rounds
    assert d.host.run().state == "Warmup"
    out = d.feed()
    assert [e.fields["reason"] for e in emitted(out, "left_epoch")] == [
        "the epoch ended before our Cooldown"
    ]


def test_stop_waits_for_training_in_flight_then_leaves_and_finishes(core):
    d = Driver(core)
    out = d.start()
    (train,) = of(out, Train)
    assert not d.feed(StopRequested())  # training in flight: wait
    out = d.feed(Trained(0, 1, train.batch, commitment(1, 0), 100, 5.0, 1024, 0.5))
    assert of(out, LeaveEpoch) and of(out, Finish) == [Finish(ExitCode.OK)]


def test_a_missed_run_of_updates_is_caught_up(core):
    d = Driver(core)
    d.host.to_warmup()
    d.feed()
    d.feed(EpochPrepared(0, True, digest=7))
    d.host.warm_up()  # we miss the first rounds entirely
    d.host.decide(ResultsList.of(0, {}).root)
    d.host.start_pending()
    d.host.decide(ResultsList.of(1, {}).root)
    d.host.start_pending()
    out = d.feed()
    assert [a.fields["step"] for a in emitted(out, "applied")] == [
        1
    ]  # decided empty: applied, nothing to do
    trains = of(out, Train)
    assert (
        trains and trains[0].step >= 2
    )  # steps whose results were already decided are passed over


def undecided_round(d: Driver) -> None:
    """Two seats, two roots: the round's training and witness time run out and it ends undecided."""
    config = d.host.run().config
    for k, index in enumerate(list(d.host.seats())[:2]):
        assert d.host.witness(index, bytes([k + 1]) * 32) == 0
    d.host.advance(config.max_round_train_time)
    assert d.host.tick() == 0
    d.host.advance(config.round_witness_time)
    assert d.host.tick() == 0


def lagged_view(core, rounds: int) -> tuple[Driver, dict[int, bytes]]:
    """Our step 1 trained, then the chain runs `rounds` more rounds unseen (a lagging RPC node, a follower
    restart): step 1 decided with our result and another trainer's, step 2 undecided, the rest empty."""
    d = Driver(core)
    d.start()
    d.feed(Trained(0, 1, d.view().rounds[1].assignment[0], commitment(1, 0), 100, 5.0, 1024, 0.5))
    other = next(i for i in d.view().rounds[1].assignment if i != 0)
    decided = {0: commitment(1, 0), other: commitment(1, other)}
    d.host.decide(ResultsList.of(0, {}).root)
    d.host.start_pending()
    d.host.decide(ResultsList.of(1, decided).root)  # the round of step 2 decides step 1
    d.host.start_pending()
    undecided_round(d)  # the round of step 3: step 2 applies nothing
    while d.host.run().progress.step < 1 + rounds:
        d.host.decide(ResultsList.of(d.host.run().progress.step - 1, {}).root)
        d.host.start_pending()
    assert d.view().newest == 1 + rounds
    return d, decided


@pytest.mark.parametrize("rounds", [5, 9])
def test_a_view_that_jumps_past_the_round_ring_still_applies_every_decision(core, rounds):
    """The ring keeps 4 rounds; the chain keeps the outcomes of the last DECISION_WINDOW past it, so a view
    that jumps up to DECISION_WINDOW + 1 rounds stays and applies exactly what each round decided."""
    d, decided = lagged_view(core, rounds)
    assert 1 + 1 not in d.view().rounds  # the round that decided step 1 left the ring
    root = ResultsList.of(1, decided).root
    out = d.feed()
    assert not of(out, LeaveEpoch)
    (ask,) = of(out, FetchList)
    assert (ask.step, ask.root) == (
        1,
        root,
    )  # ours differs: the decided list is fetched by its root
    other = max(decided)
    (fetch,) = of(d.feed(ListHeld(1, root, ResultsList.of(1, decided))), Fetch)
    assert (fetch.step, fetch.sender, fetch.commitment, fetch.decided) == (
        1,
        other,
        decided[other],
        True,
    )
    (apply,) = of(d.feed(ResultHeld(1, other, decided[other])), Apply)
    assert apply.step == 1 and apply.commitments == tuple(decided[i] for i in sorted(decided))
    out = d.feed(Applied(0, 1, 2, 7))  # the digest the seats reported
    applied = [(a.fields["step"], a.fields["decided"]) for a in emitted(out, "applied")]
    assert applied[:3] == [
        (1, True),
        (2, False),
        (3, True),
    ]  # step 2's round ended undecided: nothing
    assert not of(out, LeaveEpoch) and d.machine.applied >= rounds - 1


def test_a_view_that_jumps_past_the_decision_window_leaves(core):
    """The bound: a view that jumps further than the chain keeps outcomes cannot tell what to apply."""
    d, _ = lagged_view(core, 10)
    out = d.feed()
    assert [a.reason for a in of(out, LeaveEpoch)] == [
        "the chain no longer holds the round that decided step 1"
    ]


def test_a_due_tick_is_sent_once_per_state(core):
    d = Driver(core)
    d.host.to_warmup()
    d.host.advance(d.host.run().config.warmup_time + 1)
    out = d.feed()
    assert len(of(out, Tick)) == 1
    assert not of(d.feed(TimerFired(), dt=0.1), Tick)


def test_a_closed_run_finishes(core):
    d = Driver(core)
    d.feed()
    assert of(d.feed(RunClosed()), Finish) == [Finish(ExitCode.OK, "the run was closed")]


def test_the_next_epoch_keeps_our_weights_only_if_the_majority_voted_them(core):
    d = Driver(core)
    machine = d.machine
    machine.weights_epoch = 0
    machine.saved_manifest = (1, b"\x01" * 32)
    d.host.to_warmup()
    d.feed()
    assert machine._load_plan() == "keep"  # nothing voted yet: ours is the epoch end


# -- verification -----------------------------------------------------------------------------------------


def applied_through_step_3(d: Driver) -> list:
    """Steps 1 to 3 trained, decided with every result and applied, and round 5 started: it fixed round
    6's seed (from the slot round 4 started in, the one whose instruction decided step 2), which draws step
    2's checks; returns the actions of the update that saw it."""
    out, held = d.step_1_decided()
    assert of(out, Apply)
    d.feed(Trained(0, 2, d.view().rounds[2].assignment[0], commitment(2, 0), 100, 5.0, 1024, 0.5))
    d.feed(Applied(0, 1, len(held), digest=7))
    held = d.hold_all(2)
    d.host.start_pending()
    d.feed()
    d.host.decide(ResultsList.of(2, held).root)
    assert not of(
        d.feed(), Check
    )  # step 2 is decided and applied, but its checks are not drawn yet
    d.feed(Applied(0, 2, len(held), digest=7))
    d.host.start_pending()
    # round 4 revealed round 5's seed: step 2's checks are not drawn yet
    assert not of(d.feed(), Check)
    d.feed(Trained(0, 3, d.view().rounds[3].assignment[0], commitment(3, 0), 100, 5.0, 1024, 0.5))
    held = d.hold_all(3)
    d.host.decide(ResultsList.of(3, held).root)
    d.feed()
    d.feed(Applied(0, 3, len(held), digest=7))
    d.host.start_pending()
    return d.feed()


def test_a_seed_revealed_after_the_decision_draws_our_checks_and_a_failure_is_reported_until_it_lands(
    core,
):
    d = Driver(core, clients=4, verification_percent=100)
    out = applied_through_step_3(d)
    checks = of(out, Check)
    # every result is checked and with four clients the other three are its verifiers: we check 1, 2, 3
    # (step 1 is everyone's first of the epoch: no earlier committed state, so it is not checked)
    assert sorted(c.trainer for c in checks) == [1, 2, 3] and {c.step for c in checks} == {2}
    assert all(
        c.commitment == commitment(2, c.trainer) and c.previous == commitment(1, c.trainer)
        for c in checks
    )
    assert not of(d.feed(), Check)  # planned once
    assert of(d.feed(Checked(0, 2, 1, True, "within tolerance")), ReportCheck) == []
    out = d.feed(Checked(0, 2, 2, False, "signs disagree", "PayloadMismatch"))
    assert emitted(out, "check_failed") and of(out, ReportCheck) == [
        ReportCheck(2, 2, "PayloadMismatch")
    ]
    assert (
        of(d.feed(TxDone(ReportCheck(2, 2, "PayloadMismatch"), False, "rpc")), ReportCheck) == []
    )  # waits its retry
    assert of(d.feed(TimerFired(), dt=5.0), ReportCheck) == [ReportCheck(2, 2, "PayloadMismatch")]
    assert of(d.feed(TxDone(ReportCheck(2, 2, "PayloadMismatch"), True), dt=5.0), ReportCheck) == []
    # a check we could not run is no evidence: nothing is reported
    assert of(d.feed(Checked(0, 2, 3, False, "we no longer hold the weights")), ReportCheck) == []


def test_a_report_refused_because_its_check_lapsed_is_an_event_and_is_not_sent_again(core):
    """The check's seed left the chain's window before our report landed (CheckExpired): the machine says
    so (check_lapsed: step, trainer) instead of dropping it silently, and does not send it again."""
    d = Driver(core, clients=4, verification_percent=100)
    applied_through_step_3(d)
    report = ReportCheck(2, 2, "PayloadMismatch")
    assert of(
        d.feed(Checked(0, 2, 2, False, "signs disagree", "PayloadMismatch")), ReportCheck
    ) == [report]
    out = d.feed(TxDone(report, False, "CheckExpired"))
    assert [e.fields for e in emitted(out, "check_lapsed")] == [{"step": 2, "trainer": 2}]
    assert not emitted(out, "tx_refused") and not emitted(out, "check_reported")
    assert of(d.feed(TimerFired(), dt=5.0), ReportCheck) == []  # nothing left to send
    # any other refusal (or a report that landed) says nothing of a lapse
    d.feed(Checked(0, 2, 3, False, "signs disagree", "StateMismatch"))
    out = d.feed(TxDone(ReportCheck(2, 3, "StateMismatch"), False, "DuplicateReport"))
    assert not emitted(out, "check_lapsed")


def test_a_verdict_that_comes_after_its_epoch_is_a_lapse_not_a_report(core):
    """A check still fetching when its epoch ended: its verdict (here a failure) can no longer be reported;
    the machine says so (check_lapsed, with the verdict) instead of dropping it without a word."""
    d = Driver(core, clients=4, verification_percent=100)
    applied_through_step_3(d)
    out = d.feed(Checked(-1, 2, 2, False, "too slow", "StateNotDelivered"))
    assert of(out, ReportCheck) == [] and not emitted(out, "check_failed")
    lapsed = [e.fields for e in emitted(out, "check_lapsed")]
    assert lapsed == [{"step": 2, "trainer": 2, "reason": "too slow", "epoch": -1,
                       "verdict": "StateNotDelivered"}]  # fmt: skip


def next_decided_round(d: Driver, step: int) -> list:
    """Our step `step` trained and everyone's held, the round attesting it decides it with every result, we
    apply it and the next round starts: the actions of the update that saw it."""
    d.feed(
        Trained(
            0, step, d.view().rounds[step].assignment[0], commitment(step, 0), 100, 5.0, 1024, 0.5
        )
    )
    held = d.hold_all(step)
    d.host.decide(ResultsList.of(step, held).root)
    d.feed()
    d.feed(Applied(0, step, len(held), digest=7))
    d.host.start_pending()
    return d.feed()


def test_a_dispute_committee_replays_the_same_check_and_reports_its_verdict(core):
    """Two other verifiers of a trainer's check fail it: a dispute opens; once the seed that draws its
    committee is out, we (on it) run the same check (same commitments, same seed: same sampled bands) and
    report Passed, or the failure we found; a DisputesFull refusal is sent again later."""
    d = Driver(core, clients=4, verification_percent=100)
    applied_through_step_3(d)
    data = bytes(d.host.state)
    seed = core.check_seed(data, 2)
    trainer = 2
    reporters = [v for v in core.check_plan(data, 2, seed, trainer) if v != d.me][:2]
    for v in reporters:
        args = {"step": 2, "trainer": trainer, "reason": "StateNotDelivered"}
        assert d.host.do("report_check", d.host.wallets[v], args) == 0
    assert d.view().run.disputes and not [
        c for c in of(d.feed(), Check) if c.dispute
    ]  # its seed is not out
    out = next_decided_round(d, 4) + next_decided_round(d, 5)
    assert core.dispute_committee(bytes(d.host.state), 2, trainer) == {0, 1, 3}
    disputes = [c for c in of(out, Check) if c.dispute]
    assert disputes == [
        Check(0, 2, trainer, commitment(2, trainer), commitment(1, trainer), seed, dispute=True)
    ]
    assert not [c for c in of(d.feed(), Check) if c.dispute]  # planned once
    out = d.feed(Checked(0, 2, trainer, True, "within tolerance", dispute=True))
    assert of(out, ReportCheck) == [ReportCheck(2, trainer, "Passed")]
    # refused because every dispute slot is open: it goes again after the retry time
    assert (
        of(d.feed(TxDone(ReportCheck(2, trainer, "Passed"), False, "DisputesFull")), ReportCheck)
        == []
    )
    assert of(d.feed(TimerFired(), dt=5.0), ReportCheck) == [ReportCheck(2, trainer, "Passed")]
    assert of(d.feed(TxDone(ReportCheck(2, trainer, "Passed"), True), dt=5.0), ReportCheck) == []
    # a failure found in a dispute is reported like a check's
    out = d.feed(
        Checked(0, 2, trainer, False, "signs disagree", "PayloadMismatch", dispute=True), dt=5.0
    )
    assert of(out, ReportCheck) == [ReportCheck(2, trainer, "PayloadMismatch")]


def test_the_step_after_an_undecided_step_is_checked(core):
    """Step 2's round ends undecided: nothing of it is applied, but a trainer's step 3 still started from the
    state it committed in its result of step 2, which we held: its check replays from that."""
    d = Driver(core, clients=4, verification_percent=100)
    out, held = d.step_1_decided()
    d.feed(Trained(0, 2, d.view().rounds[2].assignment[0], commitment(2, 0), 100, 5.0, 1024, 0.5))
    d.feed(Applied(0, 1, len(held), digest=7))
    d.hold_all(2)
    d.host.start_pending()
    d.feed()
    for k, index in enumerate(d.host.seats()):  # three seats, three roots: no majority
        assert d.host.witness(index, bytes([k + 1]) * 32) == 0
    config = d.host.run().config
    d.host.advance(config.max_round_train_time)
    assert d.host.tick() == 0
    d.host.advance(config.round_witness_time)
    assert d.host.tick() == 0  # the round ends undecided and the next starts
    assert d.view().run.decided(2) == (True, None)
    d.feed()
    out = next_decided_round(d, 3) + next_decided_round(d, 4) + next_decided_round(d, 5)
    checks = [c for c in of(out, Check) if c.step == 3]
    assert sorted(c.trainer for c in checks) == [1, 2, 3]
    assert all(
        c.previous == commitment(2, c.trainer) and c.commitment == commitment(3, c.trainer)
        for c in checks
    )


def test_without_verification_nothing_is_checked(core):
    d = Driver(core, clients=4)
    assert not of(applied_through_step_3(d), Check)


def test_our_committed_states_no_drawn_check_can_read_are_released_once_the_seeds_are_out(core):
    """A check of step s reads the trainer's states of s - 1 and s: once the seeds of s and s + 1 drew no check
    of ours, our state of s is released (the blob store removes it at the next collect), not kept its rounds;
    a state a drawn check may read (and a dispute replay) stays."""

    def releases(percent: int) -> tuple[list[int], dict[int, bool]]:
        d = Driver(core, clients=4, verification_percent=percent)
        out = applied_through_step_3(d)
        for step in (4, 5, 6, 7):
            out += next_decided_round(d, step)
        data = bytes(d.host.state)
        drawn = {s: bool(core.check_plan(data, s, seed, d.me))
                 for s in range(1, 8) if (seed := core.check_seed(data, s)) is not None}  # fmt: skip
        return sorted(r.step for r in of(out, ReleaseState)), drawn

    released, drawn = releases(1)
    expected = [s for s in drawn if s + 1 in drawn and not drawn[s] and not drawn[s + 1]]
    assert len(drawn) >= 4 and released == expected and released
    released, drawn = releases(100)  # every result is checked: every state may be read
    assert released == [] and all(drawn.values())
