"""A synthetic long-memory evaluation: multi-session chats with facts planted at known turns.

Each simulated user talks to the assistant over many sessions spread across months
(several threads, 300+ turns in all). Most turns are distractors: everyday requests
on many topics with slot-filled details, plus *decoys* that share a planted fact's
vocabulary but are about someone or something else. Among them, facts are planted at
known turns, and questions are asked about them at the end (``Dataset.now``):

* ``single``: one fact, asked in other words (a paraphrase sharing few keywords);
* ``context``: the fact is a short answer whose subject was named in the turn before
  ("Yes, I still use it every day"); the evidence is the short answer itself;
* ``multi``: two facts said in different sessions, both needed;
* ``temporal``: the same kind of event happened twice at different dates; the question
  names a time ("last May", "three weeks ago") and only one occurrence is the answer;
* ``unanswerable``: a question from the same families whose fact was never said to
  this user (its decoys may have been).

Every fact family belongs to one of two disjoint pools, ``tune`` and ``heldout``, so a
weight tuned on one pool is reported on the other, on templates it never saw.

Nothing here reads agentmem: the generator yields plain data, and ``bench/recall.py``
writes it through the library like an agent would.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

# -- values for slots ----------------------------------------------------------------------
V = {
    "name": ["Hannah", "Marta", "Priya", "Chloe", "Ingrid", "Leila", "Sofia", "Yuki", "Amara", "Greta"],
    "mname": ["Tomas", "Ravi", "Jonas", "Mateo", "Kofi", "Lars", "Diego", "Owen", "Farid", "Emil"],
    "city": ["Lisbon", "Montreal", "Osaka", "Tallinn", "Valparaiso", "Edinburgh", "Porto", "Hanoi", "Ljubljana",
             "Cork"],
    "country": ["Iceland", "Peru", "Vietnam", "Morocco", "New Zealand", "Georgia", "Norway", "Chile"],
    "animal": ["beagle", "tabby cat", "greyhound", "border collie", "rabbit", "corgi"],
    "pet": ["Biscuit", "Mochi", "Pepper", "Juniper", "Waffles", "Ziggy", "Clover", "Nutmeg"],
    "car": ["2014 Honda Fit", "2019 Subaru Outback", "2011 Toyota Corolla", "2021 Kia Niro", "2008 Volvo V70"],
    "job": ["structural engineer", "pharmacist", "landscape architect", "court interpreter", "data analyst",
            "veterinary nurse"],
    "isp": ["Fibrenet", "Skyline Broadband", "Wavelink", "NorthCable"],
    "tracker": ["Jira", "Linear", "YouTrack", "Redmine"],
    "author": ["Ursula Le Guin", "Toni Morrison", "Olga Tokarczuk", "Hilary Mantel", "Zadie Smith"],
    "lang": ["Portuguese", "Korean", "Dutch", "Swahili", "Greek", "Polish"],
    "material": ["quartz", "butcher block", "soapstone", "terrazzo", "granite"],
    "instrument": ["cello", "trombone", "viola", "clarinet", "double bass"],
    "med": ["lisinopril", "amlodipine", "losartan"],
    "allergen": ["sesame", "shellfish", "peanuts", "kiwi", "mustard"],
    "item": ["fountain pen", "cast iron pan", "film camera", "pocket knife", "wristwatch", "sewing machine"],
    "relative": ["grandfather", "aunt", "godmother", "uncle", "grandmother"],
    "company": ["Brightwater Labs", "Kestrel Analytics", "Orchard Health", "Lumen Freight", "Tidewell Energy"],
    "hotel": ["Hotel Miradouro", "the Linden Inn", "Casa Azul", "the Harbour Lodge"],
    "gadget": ["dishwasher", "boiler", "laptop screen", "washing machine", "car gearbox"],
    "topic": ["pottery", "watercolour", "bookkeeping", "welding", "sign language", "improv"],
    "bought": ["a two-person tent", "a standing desk", "noise-cancelling headphones", "a road bike", "an espresso machine",
               "a rice cooker", "hiking boots", "a drone", "a sourdough starter kit"],
    "movie": ["Dune Part Two", "Past Lives", "Perfect Days", "The Zone of Interest", "Anatomy of a Fall",
              "Oppenheimer", "Poor Things"],
    "restaurant": ["Saffron House", "the Blue Heron", "Nonna Lucia", "Taqueria El Sol", "Kura Ramen", "Le Petit Four"],
    "book": ["The Overstory", "Piranesi", "Klara and the Sun", "The Dispossessed", "Educated", "Circe"],
    "person": ["Dana from finance", "our new CTO", "the auditor", "my skip-level manager", "the vendor rep"],
}

# -- fact families ------------------------------------------------------------------------
# single: (statement, question, decoy). The decoy shares words with the statement but
# is about someone or something else; it is planted whether or not the fact is.
SINGLE = [
    ("By the way, my sister {name} just moved to {city} for a new job.",
     "Which city did my sibling relocate to?",
     "A colleague of mine is thinking of moving to {city2} for a new job."),
    ("I've been allergic to {allergen} since I was a kid, so I check every label.",
     "Is there any ingredient I must avoid for health reasons?",
     "My neighbour's kid has a {allergen2} allergy, so they never come to barbecues."),
    ("We finally adopted a {animal} from the shelter and named her {pet}.",
     "What is the name of the animal we rescued?",
     "The shelter near us had a {animal2} up for adoption, cute but not for us."),
    ("My car is a {car}, it has about 90,000 miles on it.",
     "What vehicle do I drive?",
     "My brother-in-law keeps telling me to buy a newer car."),
    ("I work as a {job} at a small firm downtown.",
     "What do I do for a living?",
     "My cousin just got hired as a {job2} downtown."),
    ("I switched my home internet to {isp} because the old provider kept dropping.",
     "Which broadband company am I with these days?",
     "Half my street complains about their internet provider."),
    ("Our team tracks bugs in {tracker}, though I'd prefer something simpler.",
     "What issue tracking tool does my team use?",
     "I read a blog post comparing bug trackers, it was mostly marketing."),
    ("My favourite author is {author}, I've read everything she wrote.",
     "Whose novels do I enjoy most?",
     "My book club picked something by {author2} this month, not my taste."),
    ("I'm learning {lang} on an app, I practise every morning before breakfast.",
     "Which foreign language am I studying?",
     "My colleague speaks fluent {lang2}, I'm impressed."),
    ("We are redoing the kitchen and picked {material} countertops.",
     "What surface did we choose for the counters in the renovation?",
     "My friend's kitchen has {material2} counters and she regrets it."),
    ("I play the {instrument} in a community orchestra on Tuesday nights.",
     "Which instrument do I perform with?",
     "Our orchestra is looking for another {instrument2} player."),
    ("My doctor put me on {med} for my blood pressure.",
     "What medication was I prescribed for hypertension?",
     "My father takes something for his cholesterol, I forget what."),
    ("I'm saving up for a trip to {country} next spring.",
     "Where am I planning to go on holiday?",
     "My boss just came back from {country2} with a thousand photos."),
    ("My grandmother turns {age} next month, we're planning a party.",
     "How old is my grandma going to be?",
     "Our neighbour celebrated her {age2}th birthday with a street party."),
    ("The staging server is called {host} and listens on port {port}.",
     "Which port does our pre-production machine use?",
     "The production database moved to a new host last quarter."),
    ("My daughter's piano recital is on the {day}th at the community hall.",
     "On what date is my child's music performance?",
     "The community hall is hosting a craft fair soon."),
    ("I commute on the {line} line, it takes me about forty minutes.",
     "How do I get to work every day?",
     "There was a signal failure on the {line2} line this morning."),
    ("My landlord raised the rent to {rent} dollars a month.",
     "How much am I paying for my apartment?",
     "Rents in the city went up by a lot this year according to the news."),
    ("My son {mname} starts kindergarten in September.",
     "When does my boy begin school?",
     "My friend's son {mname2} started school last year."),
    ("I'm trying to cut coffee down, I'm still at {cups} cups a day.",
     "How much caffeine do I drink daily?",
     "My partner switched to decaf recently."),
    ("My wedding anniversary is on {month} {day}.",
     "When do my spouse and I celebrate our marriage?",
     "We went to a wedding of old friends, lovely ceremony."),
    ("I ran my first half marathon in {hours} hours and {minutes} minutes.",
     "What was my finishing time for that 21 km race?",
     "My running club is organising a 10k in the park."),
    ("My blood type is {blood}, I found out when I donated.",
     "Which blood group am I?",
     "The blood bank keeps texting me about donating again."),
    ("My best friend {name} is a midwife in {city}.",
     "What does my closest friend do for work?",
     "A midwife spoke at my cousin's antenatal class."),
]

# context: (assistant question, user short answer, question)
CONTEXT = [
    ("Are you still using the {item} your {relative} gave you?", "Yes, I still use it every day.",
     "How often do I use the gift from my {relative}?"),
    ("How did the interview at {company} go?", "Really well, they offered me the job on the spot!",
     "What came out of my job interview with {company}?"),
    ("Have you heard back about the {gadget} repair?", "Yes, they quoted {rent} dollars, which is a lot.",
     "What will it cost to fix my {gadget}?"),
    ("Which hotel did you end up booking in {city}?", "{hotel}, right next to the old town.",
     "Where am I staying during my {city} trip?"),
    ("What did the vet say about {pet}?", "Just a mild ear infection, she needs drops twice a day.",
     "What health problem does {pet} have?"),
    ("Did you sign up for the {topic} course in the end?", "No, it clashed with my evening shifts.",
     "Am I taking the {topic} class?"),
    ("Is your {relative} feeling better after the surgery?", "Much better, she's walking again without a cane.",
     "How is my {relative} recovering from the operation?"),
    ("Did the landlord ever fix the leak in your bathroom?", "Not yet, I've been waiting three weeks.",
     "Has the leak in my bathroom been repaired?"),
]

# multi: (statement 1, statement 2, question)
MULTI = [
    ("Our dog {pet} loves the beach.", "Our cat {pet2} just ignores everyone in the house.",
     "What are the names of all my pets?"),
    ("My brother {mname} works as a nurse.", "My other brother {mname2} is a chef in a hotel.",
     "What jobs do my siblings have?"),
    ("The flights for our trip cost {rent} dollars.", "The hotel for the same trip was {rent2} dollars in total.",
     "How much did the holiday cost altogether?"),
    ("My manager is {name}.", "{name} told us she's transferring to the {city} office in June.",
     "Where is my boss relocating to?"),
    ("I signed up for a {topic} class on Mondays.", "I also joined a {topic2} workshop on Thursdays.",
     "Which courses am I enrolled in?"),
    ("I lent my {item} to my neighbour {mname}.", "{mname} moved to {city} last week.",
     "In which city is the thing I lent out now?"),
]

# temporal: (statement, question with {when}); planted twice with different values.
TEMPORAL = [
    ("I bought {bought} today.", "What did I buy {when}?"),
    ("Went to see {movie} at the cinema tonight.", "Which film did I watch {when}?"),
    ("Had dinner at {restaurant} with friends, great evening.", "Where did I eat out {when}?"),
    ("Just finished reading {book}.", "Which book did I finish {when}?"),
    ("I had a meeting with {person} about next year's budget.", "Who did I meet about the budget {when}?"),
]

# -- distractors --------------------------------------------------------------------------
FILLER_USER = [
    "Can you suggest a quick vegetarian dinner with {veg}?", "How long should I boil {food}?",
    "What's a polite way to decline a meeting invite?", "Explain what a {tech} is in simple terms.",
    "How do I fix a merge conflict in git?", "Any tips for sleeping better when it's hot?",
    "What's the difference between a latte and a flat white?", "Write a short birthday message for a coworker.",
    "How many grams are in {n} ounces?", "What are some good stretches for lower back pain?",
    "Suggest a name for a {adj} houseplant.", "What's a good board game for {n} players?",
    "How do I remove a {stain} stain from cotton?", "Give me three ideas for a rainy Sunday.",
    "Translate 'where is the train station' into {lang}.", "Is it worth learning {tech}?",
    "Summarise the plot of a heist movie in two lines.", "What should I pack for a weekend of hiking?",
    "How do I politely remind someone about money they owe me?", "What's a good warm-up before a run?",
    "Recommend a podcast about {subject}.", "How often should I water a {adj} fern?",
    "Help me write an out-of-office reply.", "What's the capital of {country}?",
    "How do I make my {tech} tests faster?", "What is compound interest?",
    "Can you check this sentence: 'their going to the park tomorrow'?", "Ideas for a cheap date night?",
    "What's the best way to store fresh {veg}?", "How do I unclog a sink without chemicals?",
    "Give me a five-minute breathing exercise.", "What's a good gift for a {n}-year-old?",
    "How do I negotiate a higher salary?", "Why does my sourdough come out flat?",
    "What are the symptoms of burnout?", "Suggest a playlist theme for a road trip.",
    "How should I prepare for a {subject} exam?", "What's the etiquette for tipping in {country}?",
]
FILLER_ASSISTANT = [
    "Here's a simple approach: start small, keep it consistent, and adjust as you go.",
    "Good question. The short answer is that it depends on your situation, but here are the basics.",
    "Sure! Here are a few options you could try.",
    "That's a common problem. Most people find the first two steps solve it.",
    "Happy to help. Let me know if you want more detail on any of these.",
    "Here is a draft you can adapt to your own voice.",
    "A practical rule of thumb is to test one change at a time.",
    "I'd suggest the second option, it is the least effort for the result.",
]
FILLER_SLOTS = {
    "veg": ["leeks", "spinach", "cauliflower", "aubergine", "kale", "asparagus", "beetroot"],
    "food": ["eggs", "quinoa", "brown rice", "lentils", "potatoes"],
    "tech": ["load balancer", "hash map", "VPN", "container", "Kubernetes", "Rust", "GraphQL", "pytest"],
    "n": ["2", "3", "4", "5", "6", "8", "12"],
    "adj": ["tall", "trailing", "spiky", "tiny", "variegated"],
    "stain": ["coffee", "grass", "red wine", "ink", "tomato"],
    "lang": ["Italian", "German", "Japanese", "Turkish"],
    "subject": ["history", "astronomy", "economics", "design", "statistics"],
    "country": ["Portugal", "Japan", "Canada", "Kenya", "Austria"],
}
ACKS = ["Thanks for telling me, I'll keep that in mind.", "That's good to know!", "Noted. Anything else on your mind?",
        "Oh nice, how are you feeling about it?", "Got it.", "Interesting, thanks for sharing."]


@dataclass
class Planted:
    session: int
    index: int  # message index within the session


@dataclass
class Question:
    qid: str
    user: str
    text: str
    qtype: str  # single | context | multi | temporal | unanswerable
    pool: str  # tune | heldout
    evidence: list[Planted] = field(default_factory=list)


@dataclass
class Session:
    thread: str
    start: datetime
    messages: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class UserData:
    user: str
    sessions: list[Session]
    questions: list[Question]


@dataclass
class Dataset:
    users: list[UserData]
    now: datetime

    @property
    def questions(self) -> list[Question]:
        return [q for u in self.users for q in u.questions]

    @property
    def n_messages(self) -> int:
        return sum(len(s.messages) for u in self.users for s in u.sessions)


def _pool(family: int) -> str:
    return "tune" if family % 2 == 0 else "heldout"


class _Filler:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def fill(self, template: str) -> str:
        out = template
        for slot, values in FILLER_SLOTS.items():
            while "{" + slot + "}" in out:
                out = out.replace("{" + slot + "}", self.rng.choice(values), 1)
        return out

    def exchange(self) -> list[tuple[str, str]]:
        return [("user", self.fill(self.rng.choice(FILLER_USER))), ("assistant", self.rng.choice(FILLER_ASSISTANT))]


def _slots(rng: random.Random) -> dict[str, str]:
    s = {k: rng.choice(v) for k, v in V.items()}
    for base in ("city", "animal", "job", "author", "lang", "material", "instrument", "allergen", "country",
                 "line", "name", "mname", "pet", "topic", "rent"):
        pool = V.get(base, [])
        if pool:
            s[base + "2"] = rng.choice([x for x in pool if x != s[base]])
    s.update(age=str(rng.randint(82, 97)), age2=str(rng.randint(60, 79)), host=rng.choice(["atlas-02", "kiwi", "stg-eu-1"]),
             port=str(rng.choice([8443, 5433, 9090, 6380])), day=str(rng.randint(11, 28)),
             line=rng.choice(["Red", "Jubilee", "Northern", "Blue"]), line2=rng.choice(["Circle", "Green"]),
             rent=str(rng.randint(9, 29) * 100), rent2=str(rng.randint(4, 18) * 100), cups=str(rng.randint(4, 7)),
             month=rng.choice(["April", "June", "August", "October"]), hours=str(rng.choice([1, 2])),
             minutes=str(rng.randint(10, 55)), blood=rng.choice(["O negative", "AB positive", "B negative"]))
    return s


def _fmt(template: str, slots: dict[str, str]) -> str:
    return template.format(**slots)


def _when(event: datetime, now: datetime, rng: random.Random) -> str:
    """A natural time expression for ``event`` as seen from ``now``."""
    days = (now - event).days
    month = event.strftime("%B")
    options = [f"in {month} {event.year}"]
    if days <= 330:
        options.append(f"last {month}" if event.month != now.month else f"in {month}")
    if days <= 60:
        weeks = round(days / 7)
        if weeks >= 2:
            options.append(f"{['', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine'][weeks]} weeks ago")
    if 25 <= days <= 40:
        options.append("a month ago")
    return rng.choice(options)


def generate(seed: int = 7, n_users: int = 4, n_sessions: int = 24, exchanges_per_session: int = 11,
             now: datetime | None = None) -> Dataset:
    """Build the dataset. Defaults: 4 users x 24 sessions x ~8 exchanges = 300+ turns per user."""
    rng = random.Random(seed)
    now = now or datetime(2026, 10, 15, 18, 0, tzinfo=timezone.utc)
    users = []
    for u in range(n_users):
        user = f"lm-user-{u}"
        filler = _Filler(rng)
        threads = [f"{user}-thread-{t}" for t in range(3)]
        # Sessions spread over the ~11 months before now, a few days to two weeks apart.
        start = now - timedelta(days=330)
        sessions = []
        for s in range(n_sessions):
            start += timedelta(days=rng.randint(6, 17), hours=rng.randint(0, 6))
            if start > now - timedelta(days=1):
                start = now - timedelta(days=n_sessions - s)
            sessions.append(Session(thread=threads[s % len(threads)], start=start.replace(minute=0, second=0)))
        for sess in sessions:
            for _ in range(exchanges_per_session):
                sess.messages.extend(filler.exchange())
        questions: list[Question] = []

        def plant(session: int, turns: list[tuple[str, str]], evidence_offsets: list[int]) -> list[Planted]:
            sess = sessions[session]
            at = rng.randrange(0, len(sess.messages) + 1, 2)  # between exchanges
            sess.messages[at:at] = turns
            # Later plants in the same session shift earlier ones: recompute from the end.
            out = [Planted(session, at + off) for off in evidence_offsets]
            for q in questions:
                for ev in q.evidence:
                    if ev.session == session and ev.index >= at:
                        ev.index += len(turns)
            return out

        qn = 0

        def ask(text: str, qtype: str, pool: str, evidence: list[Planted]) -> None:
            nonlocal qn
            questions.append(Question(f"{user}-q{qn}", user, text, qtype, pool, evidence))
            qn += 1

        # Single facts: most families planted, the rest asked as unanswerable (decoys planted anyway).
        fams = list(range(len(SINGLE)))
        rng.shuffle(fams)
        unanswerable = set(fams[:6])
        for fam in fams:
            stmt, question, decoy = SINGLE[fam]
            slots = _slots(rng)
            plant(rng.randrange(n_sessions), [("user", _fmt(decoy, slots)), ("assistant", rng.choice(ACKS))], [])
            if fam in unanswerable:
                ask(_fmt(question, slots), "unanswerable", _pool(fam), [])
                continue
            ev = plant(rng.randrange(n_sessions - 2), [("user", _fmt(stmt, slots)), ("assistant", rng.choice(ACKS))], [0])
            ask(_fmt(question, slots), "single", _pool(fam), ev)
        for fam, (a_q, u_a, question) in enumerate(CONTEXT):
            slots = _slots(rng)
            ev = plant(rng.randrange(n_sessions - 2), [("assistant", _fmt(a_q, slots)), ("user", _fmt(u_a, slots)),
                                                        ("assistant", rng.choice(ACKS))], [1])
            ask(_fmt(question, slots), "context", _pool(fam), ev)
        for fam, (s1, s2, question) in enumerate(MULTI):
            slots = _slots(rng)
            a, b = sorted(rng.sample(range(n_sessions - 1), 2))
            ev1 = plant(a, [("user", _fmt(s1, slots)), ("assistant", rng.choice(ACKS))], [0])
            ev2 = plant(b, [("user", _fmt(s2, slots)), ("assistant", rng.choice(ACKS))], [0])
            ask(_fmt(question, slots), "multi", _pool(fam), ev1 + ev2)
        for fam, (stmt, question) in enumerate(TEMPORAL):
            # Two occurrences at least 40 days apart; the question names one of them.
            while True:
                a, b = sorted(rng.sample(range(n_sessions), 2))
                if (sessions[b].start - sessions[a].start).days >= 40:
                    break
            values = rng.sample(V[_slot_of(stmt)], 2)
            ev_a = plant(a, [("user", stmt.format(**{_slot_of(stmt): values[0]})), ("assistant", rng.choice(ACKS))], [0])
            ev_b = plant(b, [("user", stmt.format(**{_slot_of(stmt): values[1]})), ("assistant", rng.choice(ACKS))], [0])
            target, ev = rng.choice([(a, ev_a), (b, ev_b)])
            ask(question.format(when=_when(sessions[target].start, now, rng)), "temporal", _pool(fam), ev)
        users.append(UserData(user, sessions, questions))
    return Dataset(users, now)


def _slot_of(template: str) -> str:
    return template.split("{", 1)[1].split("}", 1)[0]


def message_times(session: Session) -> list[datetime]:
    """When each message of a session was said: a minute or so apart."""
    return [session.start + timedelta(seconds=50 * i) for i in range(len(session.messages))]


if __name__ == "__main__":
    data = generate()
    qs = data.questions
    print(f"{len(data.users)} users, {data.n_messages} messages, "
          f"{sum(len(s.messages) for s in data.users[0].sessions) // 2} turns for the first user, {len(qs)} questions")
    for qtype in ("single", "context", "multi", "temporal", "unanswerable"):
        sample = [q for q in qs if q.qtype == qtype]
        print(f"  {qtype:12s} {len(sample):3d}  e.g. {sample[0].text!r}")
        for ev in sample[0].evidence:
            print(f"      evidence: {data.users[0].sessions[ev.session].messages[ev.index]}")
