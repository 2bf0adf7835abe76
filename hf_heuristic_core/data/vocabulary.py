"""Word lists of the offline HANS-style generator (this project's own, not HANS's)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GENERATOR_VOCABULARY", "Vocabulary"]

@dataclass(frozen=True)
class Vocabulary:
    """Word lists for :func:`generate_nli`. Verbs are ``(base, third person singular, past[, participle])``.

    Noun forms and verb forms must not overlap, so a sentence can be checked by looking words up."""

    nouns: tuple[tuple[str, str], ...]
    transitive: tuple[tuple[str, str, str, str], ...]
    intransitive: tuple[tuple[str, str, str], ...]
    np_or_clause: tuple[tuple[str, str, str], ...]   # take an object NP or a clause: the NP/S ambiguity
    factive: tuple[tuple[str, str, str], ...]        # "knew that S" entails S
    nonfactive: tuple[tuple[str, str, str], ...]     # "believed that S" does not
    prepositions: tuple[str, ...]
    factive_adverbs: tuple[str, ...]
    nonfactive_adverbs: tuple[str, ...]
    conditionals: tuple[str, ...]
    relative_pronouns: tuple[str, ...] = ("who", "that")

    def verb_lemmas(self) -> dict[str, str]:
        """Every verb form -> its base form."""
        lemmas: dict[str, str] = {}
        for group in (self.transitive, self.intransitive, self.np_or_clause, self.factive, self.nonfactive):
            for forms in group:
                for form in forms:
                    lemmas[form] = forms[0]
        return lemmas

    def validate(self) -> None:
        noun_forms = {f for pair in self.nouns for f in pair}
        clash = noun_forms & set(self.verb_lemmas())
        if clash:
            raise ValueError(f"words used both as nouns and verbs: {sorted(clash)}")
        if len(self.nouns) < 6:
            raise ValueError("the generator needs at least 6 nouns")


GENERATOR_VOCABULARY = Vocabulary(
    nouns=tuple((n, p) for n, p in (
        ("pilot", "pilots"), ("baker", "bakers"), ("nurse", "nurses"), ("farmer", "farmers"),
        ("painter", "painters"), ("chef", "chefs"), ("dancer", "dancers"), ("sailor", "sailors"),
        ("teacher", "teachers"), ("coach", "coaches"), ("poet", "poets"), ("clerk", "clerks"),
        ("mayor", "mayors"), ("singer", "singers"), ("driver", "drivers"), ("plumber", "plumbers"),
        ("editor", "editors"), ("waiter", "waiters"), ("surgeon", "surgeons"), ("architect", "architects"),
        ("gardener", "gardeners"), ("pianist", "pianists"),
    )),
    transitive=(
        ("greet", "greets", "greeted", "greeted"), ("thank", "thanks", "thanked", "thanked"),
        ("call", "calls", "called", "called"), ("help", "helps", "helped", "helped"),
        ("visit", "visits", "visited", "visited"), ("follow", "follows", "followed", "followed"),
        ("admire", "admires", "admired", "admired"), ("warn", "warns", "warned", "warned"),
        ("hire", "hires", "hired", "hired"), ("praise", "praises", "praised", "praised"),
        ("invite", "invites", "invited", "invited"), ("blame", "blames", "blamed", "blamed"),
        ("trust", "trusts", "trusted", "trusted"), ("see", "sees", "saw", "seen"),
        ("meet", "meets", "met", "met"), ("find", "finds", "found", "found"),
        ("teach", "teaches", "taught", "taught"), ("forgive", "forgives", "forgave", "forgiven"),
    ),
    intransitive=(
        ("sleep", "sleeps", "slept"), ("laugh", "laughs", "laughed"), ("wait", "waits", "waited"),
        ("leave", "leaves", "left"), ("arrive", "arrives", "arrived"), ("smile", "smiles", "smiled"),
        ("shout", "shouts", "shouted"), ("rest", "rests", "rested"), ("complain", "complains", "complained"),
        ("swim", "swims", "swam"), ("yawn", "yawns", "yawned"),
    ),
    # Perception verbs (see, hear, notice) are left out on purpose: "hears the nurses wait" has a bare-infinitive
    # reading that *does* entail "hears the nurses".
    np_or_clause=(
        ("forget", "forgets", "forgot"), ("remember", "remembers", "remembered"),
        ("mention", "mentions", "mentioned"), ("report", "reports", "reported"),
    ),
    factive=(
        ("know", "knows", "knew"), ("realize", "realizes", "realized"), ("regret", "regrets", "regretted"),
        ("discover", "discovers", "discovered"), ("learn", "learns", "learned"),
    ),
    nonfactive=(
        ("believe", "believes", "believed"), ("hope", "hopes", "hoped"), ("think", "thinks", "thought"),
        ("claim", "claims", "claimed"), ("suspect", "suspects", "suspected"), ("imagine", "imagines", "imagined"),
    ),
    prepositions=("near", "beside", "behind", "next to", "across from"),
    factive_adverbs=("clearly", "certainly", "undoubtedly", "obviously", "definitely"),
    nonfactive_adverbs=("perhaps", "maybe", "probably", "supposedly", "possibly"),
    conditionals=("if", "unless", "whenever", "provided that"),
)
"""The generator's own word lists (not HANS's)."""

GENERATOR_VOCABULARY.validate()
