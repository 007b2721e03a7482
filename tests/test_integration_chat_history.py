"""AgentMemChatMessageHistory: LangChain's chat history over the conversation table."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from memory import InvalidInputError
from memory.integrations.chat_history import AgentMemChatMessageHistory


class RecordingChatModel(GenericFakeChatModel):
    prompts: list[list[Any]] = []

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.prompts.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def test_runnable_with_message_history_round_trip(mm, user):
    model = RecordingChatModel(messages=iter([AIMessage("Hello Ada!"), AIMessage("Your name is Ada.")]), prompts=[])
    prompt = ChatPromptTemplate.from_messages([("system", "You are terse."), MessagesPlaceholder("history"),
                                               ("human", "{question}")])
    chain = RunnableWithMessageHistory(
        prompt | model, lambda session_id: AgentMemChatMessageHistory(mm, user_id=user, thread_id=session_id),
        input_messages_key="question", history_messages_key="history")
    config = {"configurable": {"session_id": "chat-1"}}
    assert chain.invoke({"question": "I am Ada"}, config).content == "Hello Ada!"
    assert chain.invoke({"question": "What is my name?"}, config).content == "Your name is Ada."
    assert [m.content for m in model.prompts[1]] == ["You are terse.", "I am Ada", "Hello Ada!", "What is my name?"]
    rows = mm.read_thread(thread_id="chat-1", user_id=user)
    assert [(r.role, r.content) for r in rows] == [("user", "I am Ada"), ("assistant", "Hello Ada!"),
                                                   ("user", "What is my name?"), ("assistant", "Your name is Ada.")]


def test_messages_read_back_equal_to_what_was_added(mm, user, thread):
    history = AgentMemChatMessageHistory(mm, user_id=user, thread_id=thread)
    sent = [
        SystemMessage("be kind"),
        HumanMessage("weather in Oslo?", id="h1", additional_kwargs={"lang": "en"}),
        AIMessage("", id="a1", tool_calls=[{"id": "call_1", "name": "get_weather", "args": {"city": "Oslo"}}],
                  response_metadata={"model_name": "fake"}),
        ToolMessage("4 degrees, rain", tool_call_id="call_1", name="get_weather"),
        AIMessage([{"type": "text", "text": "It is 4 degrees"}, {"type": "text", "text": "and raining."}]),
    ]
    history.add_messages(sent)
    assert history.messages == sent
    rows = mm.read_thread(thread_id=thread, user_id=user)
    assert rows[2].tool_calls == [{"id": "call_1", "name": "get_weather", "args": {"city": "Oslo"}}]
    assert (rows[3].role, rows[3].tool_call_id, rows[3].tool_name) == ("tool", "call_1", "get_weather")
    assert rows[4].content == "It is 4 degrees\nand raining."


def test_rows_the_agent_loop_wrote_read_as_langchain_messages(mm, user, thread):
    mm.write_messages(user_id=user, thread_id=thread, messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "lookup", "args": {"q": "x"}}]},
        {"role": "tool", "content": "found", "tool_call_id": "c1", "tool_name": "lookup"}])
    msgs = AgentMemChatMessageHistory(mm, user_id=user, thread_id=thread).messages
    assert isinstance(msgs[0], HumanMessage) and msgs[1].tool_calls[0]["name"] == "lookup"
    assert isinstance(msgs[2], ToolMessage) and msgs[2].tool_call_id == "c1"


def test_histories_are_user_and_thread_scoped(mm, user):
    other = user + "-other"
    AgentMemChatMessageHistory(mm, user_id=user, thread_id="t").add_messages([HumanMessage("mine")])
    AgentMemChatMessageHistory(mm, user_id=other, thread_id="t").add_messages([HumanMessage("theirs")])
    AgentMemChatMessageHistory(mm, user_id=user, thread_id="t2").add_messages([HumanMessage("other thread")])
    assert [m.content for m in AgentMemChatMessageHistory(mm, user_id=user, thread_id="t").messages] == ["mine"]
    AgentMemChatMessageHistory(mm, user_id=user, thread_id="t").clear()
    assert AgentMemChatMessageHistory(mm, user_id=user, thread_id="t").messages == []
    assert [m.content for m in AgentMemChatMessageHistory(mm, user_id=other, thread_id="t").messages] == ["theirs"]
    assert len(AgentMemChatMessageHistory(mm, user_id=user, thread_id="t2").messages) == 1


def test_after_consolidation_the_history_starts_with_the_summary_reference(mm, user, thread):
    history = AgentMemChatMessageHistory(mm, user_id=user, thread_id=thread)
    history.add_messages([HumanMessage("My order ORD-17 is late"), AIMessage("I will check ORD-17."),
                          HumanMessage("Thanks"), AIMessage("You're welcome.")])
    result = mm.summarize_conversation(thread_id=thread, user_id=user, keep_recent=1)
    msgs = history.messages
    assert isinstance(msgs[0], SystemMessage) and f"[Summary ID: {result.summary.summary_id}]" in msgs[0].content
    assert "expand_summary" in msgs[0].content
    assert [m.content for m in msgs[1:]] == ["Thanks", "You're welcome."]
    originals = mm.expand_summary(summary_id=result.summary.summary_id, user_id=user)
    assert [m.content for m in originals.messages] == ["My order ORD-17 is late", "I will check ORD-17."]


def test_bad_messages_are_refused_and_nothing_is_written(mm, user, thread):
    history = AgentMemChatMessageHistory(mm, user_id=user, thread_id=thread)
    with pytest.raises(InvalidInputError):
        history.add_messages([HumanMessage("fine"), HumanMessage("bad \x00 byte")])
    with pytest.raises(InvalidInputError):
        history.add_messages(["not a message"])  # type: ignore[list-item]
    assert history.messages == []
    with pytest.raises(InvalidInputError):
        AgentMemChatMessageHistory(mm, user_id="", thread_id=thread)


def test_forget_user_removes_the_chat_history(mm, user, thread):
    AgentMemChatMessageHistory(mm, user_id=user, thread_id=thread).add_messages([HumanMessage("forget me")])
    assert mm.forget_user(user_id=user)["conversational_memory"] == 1
    assert AgentMemChatMessageHistory(mm, user_id=user, thread_id=thread).messages == []
